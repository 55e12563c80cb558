import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateApiKey } from '../../auth/api-keys.js';
import { createTestDatabase, startTestServer, type TestDatabase } from '../../test/harness.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.drop());

const INIT_KEY = generateApiKey();
const INIT = {
  INIT_WORKSPACE_NAME: 'Headless Co',
  INIT_USER_EMAIL: 'Owner@Headless.test',
  INIT_USER_PASSWORD: 'correct horse battery staple',
  INIT_API_KEY: INIT_KEY,
  INIT_CREDITS_USD: '25.50',
  INIT_MONTHLY_TOKEN_QUOTA: '1000000',
};

async function counts(em: import('@mikro-orm/postgresql').EntityManager) {
  const [row] = await em.execute<Record<string, string | number>[]>(
    `select (select count(*) from workspaces where lower(name) = 'headless co') as workspaces,
            (select count(*) from users where email = 'owner@headless.test') as users,
            (select count(*) from memberships m join workspaces w on w.id = m.workspace_id
              where lower(w.name) = 'headless co' and m.role = 'owner') as owners,
            (select count(*) from api_keys k join workspaces w on w.id = k.workspace_id
              where lower(w.name) = 'headless co') as keys,
            (select count(*) from credit_ledger l join workspaces w on w.id = l.workspace_id
              where lower(w.name) = 'headless co') as grants,
            (select credit_balance_micros from workspaces where lower(name) = 'headless co') as balance,
            (select monthly_token_quota from workspaces where lower(name) = 'headless co') as quota`,
  );
  return Object.fromEntries(Object.entries(row ?? {}).map(([k, v]) => [k, Number(v)]));
}

describe('headless init (INIT_* variables)', () => {
  it('creates the workspace, owner, key and credits once, however often the server starts', async () => {
    const first = await startTestServer({ db, env: INIT });
    const afterFirst = await counts(first.server.deps.em());
    await first.close();
    expect(afterFirst).toEqual({
      workspaces: 1,
      users: 1,
      owners: 1,
      keys: 1,
      grants: 1,
      balance: 25_500_000,
      quota: 1_000_000,
    });

    // Started again, even with other amounts: nothing is duplicated and credits are not granted twice.
    const second = await startTestServer({
      db,
      env: { ...INIT, INIT_CREDITS_USD: '99', INIT_MONTHLY_TOKEN_QUOTA: '5' },
    });
    try {
      expect(await counts(second.server.deps.em())).toEqual(afterFirst);
      const res = await second.api('/me', { key: INIT_KEY });
      expect(res.status).toBe(200);
      const me = (await res.json()) as { workspace: { name: string }; apiKey: { name: string } };
      expect(me.workspace.name).toBe('Headless Co');
      expect(me.apiKey.name).toBe('init');
      const [user] = await second.server.deps
        .em()
        .execute<{ password_hash: string }[]>(
          "select password_hash from users where email = 'owner@headless.test'",
        );
      expect(user?.password_hash).toMatch(/^\$argon2id\$/);
    } finally {
      await second.close();
    }
  }, 120_000);

  it('does not duplicate anything when two servers start at the same time', async () => {
    const env = {
      ...INIT,
      INIT_WORKSPACE_NAME: 'Race Co',
      INIT_API_KEY: generateApiKey(),
      INIT_USER_EMAIL: '',
    };
    const servers = await Promise.all([startTestServer({ db, env }), startTestServer({ db, env })]);
    try {
      const em = servers[0].server.deps.em();
      const ws = await em.execute<{ id: string }[]>("select id from workspaces where name = 'Race Co'");
      expect(ws).toHaveLength(1);
      const [row] = await em.execute<{ keys: string; grants: string }[]>(
        `select (select count(*) from api_keys where workspace_id = ?) as keys,
                (select count(*) from credit_ledger where workspace_id = ?) as grants`,
        [ws[0]?.id, ws[0]?.id],
      );
      expect([Number(row?.keys), Number(row?.grants)]).toEqual([1, 1]);
    } finally {
      await Promise.all(servers.map((s) => s.close()));
    }
  }, 120_000);

  it('refuses to start on a malformed INIT_API_KEY or a key of another workspace', async () => {
    await expect(
      startTestServer({ db, env: { INIT_WORKSPACE_NAME: 'Bad Key Co', INIT_API_KEY: 'svc_ai_short' } }),
    ).rejects.toThrow('API key must be "svc_ai_" followed by 64 letters or digits');
    await expect(
      startTestServer({ db, env: { INIT_WORKSPACE_NAME: 'Other Co', INIT_API_KEY: INIT_KEY } }),
    ).rejects.toThrow('INIT_API_KEY is already registered to another workspace');
  }, 120_000);
});
