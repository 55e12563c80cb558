import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestSession,
  createTestWorkspace,
  startTestServerWithFakeModel,
  type TestSession,
  type TestWorkspace,
} from '../../test/harness.js';

let ts: Awaited<ReturnType<typeof startTestServerWithFakeModel>>;
let ws: TestWorkspace;
let other: TestWorkspace;
let owner: TestSession;
let admin: TestSession;
let member: TestSession;
beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RATE_LIMIT_CHAT: '1000' } });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  other = await createTestWorkspace(ts);
  owner = await createTestSession(ts, ws, { role: 'owner' });
  admin = await createTestSession(ts, ws, { role: 'admin' });
  member = await createTestSession(ts, ws, { role: 'member' });
});
afterAll(() => ts?.close());

const path = (workspaceId = ws.workspaceId, suffix = '') => `/workspaces/${workspaceId}/api-keys${suffix}`;
interface ApiKey {
  id: string;
  name: string | null;
  prefix: string;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
  usage: { requests: number; inputTokens: number; outputTokens: number; costUsd: number };
}
const list = async (key: string, query = '') => {
  const res = await ts.api(`${path()}${query}`, { key });
  expect(res.status).toBe(200);
  return ((await res.json()) as { apiKeys: ApiKey[] }).apiKeys;
};
const create = (key: string, json: unknown = {}, workspaceId = ws.workspaceId) =>
  ts.api(path(workspaceId), { method: 'POST', key, json });

describe('API key management (sessions of owners and admins)', () => {
  it('creates a key shown once, usable at once, listed with its usage', async () => {
    const res = await create(admin.token, { name: '  ci  ' });
    expect(res.status).toBe(201);
    const body = (await res.json()) as { key: string; apiKey: ApiKey };
    expect(body.key).toMatch(/^svc_ai_[A-Za-z0-9]{64}$/);
    expect(body.apiKey).toMatchObject({
      name: 'ci',
      prefix: `${body.key.slice(0, 11)}…`,
      lastUsedAt: null,
      revokedAt: null,
      usage: { requests: 0, inputTokens: 0, outputTokens: 0, costUsd: 0 },
    });
    // Only its hash is stored; the listing never shows it again.
    const [row] = await ts.server.deps
      .em()
      .execute<{ key_hash: string; created_by: string }[]>(
        'select key_hash, created_by from api_keys where id = ?',
        [body.apiKey.id],
      );
    expect(row?.key_hash).not.toContain(body.key.slice(7));
    expect(row?.created_by).toBe(admin.userId);
    const listed = await list(owner.token);
    expect(JSON.stringify(listed)).not.toContain(body.key.slice(12));
    expect(listed.map((k) => k.id)).toContain(body.apiKey.id);

    // Usage per key: requests, tokens and cost of what the key did.
    ts.fake.script({ text: ['hi'], usage: { prompt_tokens: 10, completion_tokens: 5 } });
    const chat = await ts.api('/chat', {
      method: 'POST',
      key: body.key,
      json: { messages: [{ role: 'user', content: 'hello' }] },
    });
    expect(chat.status).toBe(200);
    await chat.text();
    await expect
      .poll(async () => (await list(owner.token)).find((k) => k.id === body.apiKey.id)?.usage)
      .toEqual({ requests: 1, inputTokens: 10, outputTokens: 5, costUsd: 0.00002 });
    const used = (await list(owner.token)).find((k) => k.id === body.apiKey.id);
    expect(used?.lastUsedAt).not.toBeNull();
  });

  it('works with a cookie session from a trusted origin, refuses it cross-site (CSRF)', async () => {
    const ok = await ts.api(path(), {
      method: 'POST',
      headers: { cookie: owner.cookie, origin: ts.url },
      json: { name: 'from the console' },
    });
    expect(ok.status).toBe(201);
    const created = (await ok.json()) as { apiKey: ApiKey };
    const cross = await ts.api(path(ws.workspaceId, `/${created.apiKey.id}`), {
      method: 'DELETE',
      headers: { cookie: owner.cookie, origin: 'https://evil.example' },
    });
    expect(cross.status).toBe(403);
    expect(await cross.json()).toEqual({ error: 'Cross-site request refused', code: 'CSRF_REJECTED' });
    const del = await ts.api(path(ws.workspaceId, `/${created.apiKey.id}`), {
      method: 'DELETE',
      headers: { cookie: owner.cookie, origin: ts.url },
    });
    expect(del.status).toBe(200);
  });

  it('revokes a key: it stops working, leaves the default listing, stays in includeRevoked', async () => {
    const { key, apiKey } = (await (await create(owner.token, { name: 'short-lived' })).json()) as {
      key: string;
      apiKey: ApiKey;
    };
    expect((await ts.api('/me', { key })).status).toBe(200);
    const res = await ts.api(path(ws.workspaceId, `/${apiKey.id}`), { method: 'DELETE', key: owner.token });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { revoked: boolean; apiKey: ApiKey };
    expect(body.revoked).toBe(true);
    expect(body.apiKey.revokedAt).not.toBeNull();
    const me = await ts.api('/me', { key });
    expect(me.status).toBe(401);
    expect(await me.json()).toEqual({ error: 'Invalid API key' });
    expect((await list(owner.token)).map((k) => k.id)).not.toContain(apiKey.id);
    expect((await list(owner.token, '?includeRevoked=true')).map((k) => k.id)).toContain(apiKey.id);
  });

  it('answers 404 API key not found for unknown, malformed and other workspaces’ ids', async () => {
    for (const id of ['00000000-0000-4000-8000-000000000000', 'not-a-uuid', other.keyId]) {
      const res = await ts.api(path(ws.workspaceId, `/${id}`), { method: 'DELETE', key: owner.token });
      expect(res.status, id).toBe(404);
      expect(await res.json()).toEqual({ error: 'API key not found' });
    }
    // The other workspace's key still works.
    expect((await ts.api('/me', { key: other.apiKey })).status).toBe(200);
  });

  it('allows at most 10 active keys: the 11th is a clear 400, concurrent creations included', async () => {
    const w = await createTestWorkspace(ts); // one key already
    const o = await createTestSession(ts, w, { role: 'owner' });
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => create(o.token, { name: `k${i}` }, w.workspaceId)),
    );
    const statuses = results.map((r) => r.status).sort();
    expect(statuses.filter((s) => s === 201)).toHaveLength(9);
    expect(statuses.filter((s) => s === 400)).toHaveLength(3);
    const refused = results.find((r) => r.status === 400) as Response;
    expect(await refused.json()).toEqual({
      error: 'A workspace can have at most 10 active API keys',
      code: 'API_KEY_LIMIT_REACHED',
    });
    // Revoking one frees a place.
    await ts.api(`/workspaces/${w.workspaceId}/api-keys/${w.keyId}`, { method: 'DELETE', key: o.token });
    expect((await create(o.token, {}, w.workspaceId)).status).toBe(201);
  });

  it('refuses members with 403 Insufficient permissions to create API keys, on every operation', async () => {
    const forbidden = { error: 'Insufficient permissions to create API keys' };
    const l = await ts.api(path(), { key: member.token });
    expect(l.status).toBe(403);
    expect(await l.json()).toEqual(forbidden);
    const c = await create(member.token, { name: 'mine' });
    expect(c.status).toBe(403);
    expect(await c.json()).toEqual(forbidden);
    const d = await ts.api(path(ws.workspaceId, `/${ws.keyId}`), { method: 'DELETE', key: member.token });
    expect(d.status).toBe(403);
    expect(await d.json()).toEqual(forbidden);
    expect((await ts.api('/me', { key: ws.apiKey })).status).toBe(200);
  });

  it('refuses API keys, widget tokens and anonymous callers with 401', async () => {
    for (const key of [ws.apiKey, undefined]) {
      for (const [method, p] of [
        ['GET', path()],
        ['POST', path()],
        ['DELETE', path(ws.workspaceId, `/${ws.keyId}`)],
      ] as const) {
        const res = await ts.api(p, { method, key, ...(method === 'POST' ? { json: {} } : {}) });
        expect(res.status, `${method} ${p}`).toBe(401);
        expect(await res.json()).toEqual({ error: 'Authentication required' });
      }
    }
  });

  it('never acts in another workspace by changing the path id', async () => {
    const foreign = await ts.api(path(other.workspaceId), { key: owner.token });
    expect(foreign.status).toBe(403);
    expect(await foreign.json()).toEqual({
      error: 'Access denied to workspace',
      code: 'WORKSPACE_ACCESS_DENIED',
    });
    const c = await create(owner.token, { name: 'x' }, other.workspaceId);
    expect(c.status).toBe(403);
    const d = await ts.api(path(other.workspaceId, `/${other.keyId}`), {
      method: 'DELETE',
      key: owner.token,
    });
    expect(d.status).toBe(403);
    expect((await ts.api('/me', { key: other.apiKey })).status).toBe(200);
  });

  it('re-checks the role at creation: a demoted admin cannot create', async () => {
    const a = await createTestSession(ts, ws, { role: 'admin' });
    await ts.server.deps
      .em()
      .execute("update memberships set role = 'member' where user_id = ? and workspace_id = ?", [
        a.userId,
        ws.workspaceId,
      ]);
    const res = await create(a.token, {});
    expect(res.status).toBe(403);
  });

  it('validates the body', async () => {
    const res = await create(owner.token, { name: 'x'.repeat(101) });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/name must be 100 characters or less/);
    const bad = await ts.api(`${path()}?includeRevoked=maybe`, { key: owner.token });
    expect(bad.status).toBe(400);
  });
});
