import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCK_FILE } from '../db/embedded.js';
import { createServer } from '../server.js';
import { createTestDatabase, startTestServer } from '../test/harness.js';
import { type CliResult, runCliInProcess, runCliProcess } from '../test/spawn.js';

/**
 * The operator CLI against a running server: on the embedded database the test process owns
 * the data directory (createServer without `embedded`) and the CLI connects through its
 * socket; with DATABASE_URL both talk to the PostgreSQL server. Commands run in this process
 * (`cli`); the entry point as a child process (`runCliProcess`) where the process is the
 * subject: its exit code and stderr, the database it names, a data directory it opens itself.
 */
const onServer = Boolean(process.env.DATABASE_URL);
/** A CLI child process loads tsx and the ORM afresh: generous on a busy machine. */
const SLOW = 300_000;

interface Target {
  url: string;
  cliEnv: Record<string, string>;
  em: () => import('@mikro-orm/postgresql').EntityManager;
  close(): Promise<void>;
}

let target: Target;
let dataDir: string | undefined;

beforeAll(async () => {
  if (onServer) {
    const ts = await startTestServer();
    target = {
      url: ts.url,
      cliEnv: { DATABASE_URL: ts.db.databaseUrl as string },
      em: () => ts.server.deps.em(),
      close: () => ts.close(),
    };
  } else {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-cli-'));
    const server = await createServer({ env: { DATA_DIR: dataDir, LOG_LEVEL: 'silent' } });
    const { url } = await server.listen(0, '127.0.0.1');
    expect(server.deps.db.embedded).toBeDefined(); // this process owns the data directory
    target = { url, cliEnv: { DATA_DIR: dataDir }, em: () => server.deps.em(), close: () => server.close() };
  }
}, SLOW);

afterAll(async () => {
  await target?.close();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

const cli = (...args: string[]) => runCliInProcess(args, target.cliEnv);
const cliProcess = (...args: string[]) => runCliProcess(args, target.cliEnv);
const json = <T>(r: CliResult): T => {
  expect(r.stderr, r.stderr).not.toMatch(/error/i);
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as T;
};
const me = (key: string) => fetch(`${target.url}/api/v1/me`, { headers: { authorization: `Bearer ${key}` } });

/** stderr without the line naming the database (every command that opens one prints it first). */
const withoutDatabaseLine = (stderr: string) =>
  stderr
    .split('\n')
    .filter((l) => !l.startsWith('Database: ') && !l.startsWith('{"database":'))
    .join('\n');

/** A clear one-line message, never a stack trace. */
function expectOneLineError(r: CliResult, code: number, message: string | RegExp) {
  expect(r.code, r.stderr).toBe(code);
  expect(r.stdout).toBe('');
  const stderr = withoutDatabaseLine(r.stderr);
  expect(stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(stderr).not.toMatch(/\n\s+at /);
  expect(stderr.trimEnd()).toMatch(message);
}

interface WorkspaceJson {
  id: string;
  name: string;
  status: string;
  monthlyTokenQuota: number | null;
  creditBalanceUsd: number;
}
interface KeyJson {
  id: string;
  name: string | null;
  prefix: string;
  revokedAt: string | null;
  workspaceId: string;
}

describe(`operator CLI round trips (${onServer ? 'PostgreSQL server' : 'embedded, through the running server'})`, () => {
  let ws: WorkspaceJson;
  let key: string;
  let keyId: string;

  it(
    'creates and lists workspaces',
    async () => {
      const created = json<{ workspace: WorkspaceJson }>(
        await cli(
          'workspace',
          'create',
          'Cli Corp',
          '--credits-usd',
          '12.50',
          '--monthly-token-quota',
          '5000',
          '--json',
        ),
      );
      ws = created.workspace;
      expect(ws).toMatchObject({
        name: 'Cli Corp',
        status: 'active',
        monthlyTokenQuota: 5000,
        creditBalanceUsd: 12.5,
      });
      // The running server sees it: the CLI wrote to the same database.
      const rows = await target
        .em()
        .execute<{ name: string }[]>('select name from workspaces where id = ?', [ws.id]);
      expect(rows).toEqual([{ name: 'Cli Corp' }]);

      const listed = json<{ workspaces: WorkspaceJson[] }>(await cli('workspace', 'list', '--json'));
      expect(listed.workspaces.map((w) => w.id)).toContain(ws.id);
    },
    SLOW,
  );

  it(
    'creates a key that the running server accepts, shown once',
    async () => {
      const created = json<{ key: string; apiKey: KeyJson }>(
        await cli('key', 'create', 'cli corp', '--name', 'ci', '--json'),
      );
      key = created.key;
      keyId = created.apiKey.id;
      expect(key).toMatch(/^svc_ai_[A-Za-z0-9]{64}$/);
      expect(created.apiKey).toMatchObject({ name: 'ci', workspaceId: ws.id, revokedAt: null });

      const res = await me(key);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({
        workspace: { id: ws.id, name: 'Cli Corp' },
        apiKey: { id: keyId, name: 'ci' },
      });
      expect(created.apiKey.prefix).toBe(`${key.slice(0, 11)}…`);
    },
    SLOW,
  );

  it(
    'grants credits, sets the quota, creates an app and adds a user',
    async () => {
      const granted = json<{ workspaceId: string; grantedUsd: number; creditBalanceUsd: number }>(
        await cli('credits', 'grant', 'Cli Corp', '2.5', '--json'),
      );
      expect(granted).toEqual({ workspaceId: ws.id, grantedUsd: 2.5, creditBalanceUsd: 15 });

      const quota = json<{ workspace: WorkspaceJson }>(
        await cli('quota', 'set', ws.id, 'unlimited', '--json'),
      );
      expect(quota.workspace.monthlyTokenQuota).toBeNull();

      const ragQuota = json<{ ragMonthlyQueryQuota: number }>(
        await cli('rag-quota', 'set', ws.id, '3', '--json'),
      );
      expect(ragQuota.ragMonthlyQueryQuota).toBe(3);
      const ragRows = await target
        .em()
        .execute<{ q: number }[]>('select rag_monthly_query_quota as q from workspaces where id = ?', [
          ws.id,
        ]);
      expect(ragRows[0]?.q).toBe(3);

      const app = json<{
        app: { id: string; name: string; model: string | null; systemPrompt: string | null };
      }>(
        await cli(
          'app',
          'create',
          ws.id,
          'Helper',
          '--system-prompt',
          'Be brief.',
          '--model',
          'gpt-test',
          '--json',
        ),
      );
      expect(app.app).toMatchObject({ name: 'Helper', model: 'gpt-test', systemPrompt: 'Be brief.' });
      const apps = await target
        .em()
        .execute<{ workspace_id: string; system_prompt: string; model_id: string }[]>(
          'select workspace_id, system_prompt, model_id from apps where id = ?',
          [app.app.id],
        );
      expect(apps).toEqual([{ workspace_id: ws.id, system_prompt: 'Be brief.', model_id: 'gpt-test' }]);

      const user = json<{ user: { email: string; created: boolean }; membership: { role: string } }>(
        await cli(
          'user',
          'add',
          ws.id,
          'Ops@Example.test',
          '--role',
          'admin',
          '--password',
          'pw-123456',
          '--json',
        ),
      );
      expect(user).toMatchObject({
        user: { email: 'ops@example.test', created: true },
        membership: { role: 'admin' },
      });
      const [row] = await target
        .em()
        .execute<{ password_hash: string }[]>(
          "select password_hash from users where email = 'ops@example.test'",
        );
      expect(row?.password_hash).toMatch(/^\$argon2id\$/);
    },
    SLOW,
  );

  it(
    'prints a created key alone on stdout and revokes keys',
    async () => {
      const human = await cli('key', 'create', 'Cli Corp', '--as', 'ops@example.test');
      expect(human.code).toBe(0);
      expect(human.stdout).toMatch(/^svc_ai_[A-Za-z0-9]{64}\n$/);
      expect(human.stderr).toContain('shown only once');

      const revoked = json<{ apiKey: KeyJson }>(await cli('key', 'revoke', 'Cli Corp', keyId, '--json'));
      expect(revoked.apiKey.revokedAt).not.toBeNull();
      const res = await me(key);
      expect(res.status).toBe(401);
      expect(await res.json()).toEqual({ error: 'Invalid API key' });
      const all = await cli('key', 'list', 'Cli Corp', '--all', '--json');
      expect(all.stdout).not.toContain(key.slice(11)); // listings never show the key
      expect(json<{ apiKeys: KeyJson[] }>(all).apiKeys).toContainEqual(
        expect.objectContaining({
          id: keyId,
          name: 'ci',
          prefix: `${key.slice(0, 11)}…`,
          revokedAt: expect.any(String),
        }),
      );
    },
    SLOW,
  );

  it(
    'fails with one clear line and exit code 1 when the command cannot be done',
    async () => {
      const [dup, missing, badKey, member, jsonErr] = await Promise.all([
        cliProcess('workspace', 'create', 'cli CORP'), // exit code 1 as the process's
        cli('credits', 'grant', 'No Such Co', '5'),
        cli('key', 'revoke', 'Cli Corp', 'not-a-key-id'),
        cli('key', 'create', 'Cli Corp', '--as', 'nobody@example.test'),
        cli('workspace', 'create', 'Cli Corp', '--json'),
      ]);
      expectOneLineError(dup, 1, 'error: Workspace "cli CORP" already exists');
      expectOneLineError(missing, 1, 'error: Workspace not found: No Such Co');
      expectOneLineError(badKey, 1, 'error: API key not found');
      expectOneLineError(member, 1, 'error: User not found: nobody@example.test');
      expect(JSON.parse(withoutDatabaseLine(jsonErr.stderr))).toEqual({
        error: 'Workspace "Cli Corp" already exists',
      });
    },
    SLOW,
  );

  it(
    'rejects bad input with one clear line and exit code 2, before touching the database',
    async () => {
      const [amount, quota, email, role, unknown, missingArg, config] = await Promise.all([
        cli('credits', 'grant', 'Cli Corp', 'ten'),
        cli('quota', 'set', 'Cli Corp', '-1'),
        cli('user', 'add', 'Cli Corp', 'not-an-email'),
        cli('user', 'add', 'Cli Corp', 'x@example.test', '--role', 'god'),
        cli('frobnicate'),
        cli('key', 'revoke', 'Cli Corp'),
        runCliProcess(['workspace', 'list'], { ...target.cliEnv, LOG_LEVEL: 'loud' }),
      ]);
      expectOneLineError(amount, 2, /Invalid amount "ten"/);
      expectOneLineError(quota, 2, /Invalid token quota "-1"/);
      expectOneLineError(email, 2, /Invalid email "not-an-email"/);
      expectOneLineError(role, 2, /Allowed choices are owner, admin, member/);
      expectOneLineError(unknown, 2, /unknown command 'frobnicate'/);
      expectOneLineError(missingArg, 2, /missing required argument 'keyId'/);
      expectOneLineError(config, 2, /Invalid configuration: LOG_LEVEL/);
    },
    SLOW,
  );
});

describe('operator CLI: which database', () => {
  it(
    'says on stderr which database it uses',
    async () => {
      const r = await cliProcess('workspace', 'list');
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr.split('\n')[0]).toBe(
        onServer
          ? `Database: PostgreSQL server ${new URL(target.cliEnv.DATABASE_URL as string).username}@127.0.0.1:5432${new URL(target.cliEnv.DATABASE_URL as string).pathname} (DATABASE_URL)`
          : `Database: embedded, in ${dataDir} (DATA_DIR), through the running server (pid ${process.pid})`,
      );
      const j = await cliProcess('workspace', 'list', '--json');
      expect(JSON.parse(j.stderr.split('\n')[0] as string)).toEqual({
        database: expect.stringMatching(/^Database: /),
      });
      expect(JSON.parse(j.stdout)).toHaveProperty('workspaces');
    },
    SLOW,
  );

  it(
    'warns when it finds an empty embedded database it has just created (another DATA_DIR than the server)',
    async () => {
      const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-cli-new-'));
      try {
        const first = await runCliProcess(['workspace', 'list'], { DATA_DIR: elsewhere });
        expect(first.code, first.stderr).toBe(0);
        expect(first.stdout).toBe('No workspaces.\n');
        expect(first.stderr).toBe(
          `Database: embedded, in ${elsewhere} (DATA_DIR)\n` +
            `warning: ${elsewhere} held no database: this command created a new, empty one. If your server runs with another DATA_DIR (or DATABASE_URL), run the CLI with the same setting.\n`,
        );
        // Opened again, the database is no longer new: no warning.
        const again = await runCliProcess(['workspace', 'list'], { DATA_DIR: elsewhere });
        expect(again.stderr).toBe(`Database: embedded, in ${elsewhere} (DATA_DIR)\n`);
      } finally {
        fs.rmSync(elsewhere, { recursive: true, force: true });
      }
    },
    SLOW,
  );
});

describe('operator CLI without a running server', () => {
  if (!onServer) {
    it(
      'refuses a schema the running server does not have, without migrating it',
      async () => {
        const em = target.em();
        const [last] = await em.execute<{ id: number; name: string; executed_at: Date }[]>(
          'select id, name, executed_at from mikro_orm_migrations order by id desc limit 1',
        );
        await em.execute('delete from mikro_orm_migrations where id = ?', [last?.id]);
        try {
          const r = await cli('workspace', 'list');
          expectOneLineError(r, 1, /runs an older schema \(1 migration\(s\) pending\): restart it/);
          const rows = await em.execute('select 1 from mikro_orm_migrations where name = ?', [last?.name]);
          expect(rows).toHaveLength(0); // the CLI did not migrate behind the server's back
        } finally {
          await em.execute('insert into mikro_orm_migrations (id, name, executed_at) values (?, ?, ?)', [
            last?.id,
            last?.name,
            last?.executed_at,
          ]);
        }
      },
      SLOW,
    );
  }

  it(
    onServer
      ? 'migrates a fresh PostgreSQL database by itself'
      : 'opens the data directory itself once the server has stopped, and releases it',
    async () => {
      if (onServer) {
        const fresh = await createTestDatabase();
        try {
          const r = json<{ workspaces: WorkspaceJson[] }>(
            await runCliProcess(['workspace', 'list', '--json'], { DATABASE_URL: fresh.databaseUrl }),
          );
          expect(r).toEqual({ workspaces: [] });
        } finally {
          await fresh.drop();
        }
        return;
      }
      await target.close();
      expect(fs.existsSync(path.join(dataDir as string, LOCK_FILE))).toBe(false);
      const listed = json<{ workspaces: WorkspaceJson[] }>(await cliProcess('workspace', 'list', '--json'));
      expect(listed.workspaces.map((w) => w.name)).toContain('Cli Corp');
      expect(fs.existsSync(path.join(dataDir as string, LOCK_FILE))).toBe(false);
    },
    SLOW,
  );
});
