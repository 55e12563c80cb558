import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateApiKey } from '../../auth/api-keys.js';
import { createTestWorkspace, startTestServer, type TestServer } from '../../test/harness.js';
import { WorkspacesService } from './service.js';

let ts: TestServer;
beforeAll(async () => {
  ts = await startTestServer();
});
afterAll(() => ts?.close());

const INVALID = { error: 'Invalid API key' };

describe('API key authentication', () => {
  it('answers 401 Invalid API key for missing, malformed, unknown, revoked and deactivated keys', async () => {
    const ws = await createTestWorkspace(ts);
    const svc = new WorkspacesService(ts.server.deps.em());
    const revoked = await svc.createApiKey({ workspaceId: ws.workspaceId, name: 'old' });
    await svc.revokeApiKey(ws.workspaceId, revoked.apiKey.id);

    const suspendedWs = await createTestWorkspace(ts);
    await ts.server.deps
      .em()
      .execute("update workspaces set status = 'suspended' where id = ?", [suspendedWs.workspaceId]);

    const cases: Record<string, Record<string, string>> = {
      missing: {},
      'not bearer': { authorization: `Basic ${ws.apiKey}` },
      'empty bearer': { authorization: 'Bearer ' },
      malformed: { authorization: 'Bearer svc_ai_short' },
      'wrong prefix': { authorization: `Bearer sk_ai_${'a'.repeat(64)}` },
      unknown: { authorization: `Bearer ${generateApiKey()}` },
      revoked: { authorization: `Bearer ${revoked.key}` },
      deactivated: { authorization: `Bearer ${suspendedWs.apiKey}` },
    };
    for (const [name, headers] of Object.entries(cases)) {
      const res = await ts.api('/me', { headers });
      expect(res.status, name).toBe(401);
      expect(await res.json(), name).toEqual(INVALID);
    }
  });

  it('GET /me returns the workspace and key behind a valid key', async () => {
    const ws = await createTestWorkspace(ts, { name: 'Me Corp' });
    const res = await ts.api('/me', { key: ws.apiKey });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      workspace: { id: ws.workspaceId, name: 'Me Corp' },
      apiKey: { id: ws.keyId, name: 'test' },
    });
  });
});

describe('API keys', () => {
  it('have the spec format and are stored only as a hash', async () => {
    const ws = await createTestWorkspace(ts);
    expect(ws.apiKey).toMatch(/^svc_ai_[A-Za-z0-9]{64}$/);
    // No column of any table holds the plaintext key.
    const em = ts.server.deps.em();
    const tables = await em.execute<{ table_name: string }[]>(
      "select table_name from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE'",
    );
    for (const { table_name } of tables) {
      const rows = await em.execute<{ hit: boolean }[]>(
        `select exists (select 1 from "${table_name}" t where t::text like ?) as hit`,
        [`%${ws.apiKey.slice(7, 40)}%`],
      );
      expect(rows[0]?.hit, table_name).toBe(false);
    }
    const [row] = await em.execute<{ key_hash: string; key_prefix: string }[]>(
      'select key_hash, key_prefix from api_keys where id = ?',
      [ws.keyId],
    );
    expect(row?.key_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(row?.key_prefix).toBe(`${ws.apiKey.slice(0, 11)}…`);
  });

  it('allows at most 10 active keys per workspace, counting revocations', async () => {
    const ws = await createTestWorkspace(ts); // one key already
    const svc = new WorkspacesService(ts.server.deps.em());
    const created = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) =>
        new WorkspacesService(ts.server.deps.em()).createApiKey({
          workspaceId: ws.workspaceId,
          name: `k${i}`,
        }),
      ),
    );
    expect(created.filter((r) => r.status === 'fulfilled')).toHaveLength(9);
    const rejected = created.filter((r) => r.status === 'rejected') as PromiseRejectedResult[];
    expect(rejected[0]?.reason.message).toBe('A workspace can have at most 10 active API keys');
    expect(await svc.listApiKeys(ws.workspaceId)).toHaveLength(10);
    await svc.revokeApiKey(ws.workspaceId, ws.keyId);
    await expect(svc.createApiKey({ workspaceId: ws.workspaceId })).resolves.toBeDefined();
  });

  it('lets only owners and admins create keys when an acting user is named', async () => {
    const ws = await createTestWorkspace(ts);
    const svc = new WorkspacesService(ts.server.deps.em());
    const member = await svc.ensureUser('member@example.test');
    await svc.ensureMembership(ws.workspaceId, member.id, 'member');
    await expect(
      svc.createApiKey({ workspaceId: ws.workspaceId, actingUserId: member.id }),
    ).rejects.toMatchObject({ status: 403, message: 'Insufficient permissions to create API keys' });
    const admin = await svc.ensureUser('admin@example.test');
    await svc.ensureMembership(ws.workspaceId, admin.id, 'admin');
    await expect(
      svc.createApiKey({ workspaceId: ws.workspaceId, actingUserId: admin.id }),
    ).resolves.toMatchObject({ key: expect.stringMatching(/^svc_ai_/) });
  });

  it('records last use of a key', async () => {
    const ws = await createTestWorkspace(ts);
    await ts.api('/me', { key: ws.apiKey });
    const svc = new WorkspacesService(ts.server.deps.em());
    await expect.poll(async () => (await svc.listApiKeys(ws.workspaceId))[0]?.lastUsedAt).not.toBeNull();
  });
});
