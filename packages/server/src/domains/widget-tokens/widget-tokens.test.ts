import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

let ts: TestServer;
let ws: TestWorkspace;
let other: TestWorkspace;
let appId: string;
let app2Id: string;

const json = async <T = any>(res: Response): Promise<T> => (await res.json()) as T;

async function issue(body: Record<string, unknown> = {}, key = ws.apiKey) {
  const res = await ts.api('/widget-tokens', { method: 'POST', key, json: body });
  return { res, body: await json(res) };
}

beforeAll(async () => {
  ts = await startTestServer();
  ws = await createTestWorkspace(ts);
  other = await createTestWorkspace(ts);
  appId = (
    await json(await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'Widget app' } }))
  ).app.id;
  app2Id = (
    await json(await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'Second app' } }))
  ).app.id;
});
afterAll(() => ts?.close());

describe('issuance', () => {
  it('issues an app-scoped token with defaults, shown once, listed without the secret', async () => {
    const { res, body } = await issue({ appId, name: 'site', allowedOrigins: ['https://shop.example/'] });
    expect(res.status).toBe(201);
    expect(body.token).toMatch(/^svc_wt_[A-Za-z0-9]{48}$/);
    expect(body.widgetToken).toMatchObject({
      scope: 'app',
      appId,
      name: 'site',
      allowedOrigins: ['https://shop.example'],
      maxRequests: 1000,
      requestCount: 0,
      revokedAt: null,
      subject: null,
    });
    const ttl = Date.parse(body.widgetToken.expiresAt) - Date.parse(body.widgetToken.createdAt);
    expect(ttl).toBe(3600 * 1000);
    const list = await json(await ts.api('/widget-tokens', { key: ws.apiKey }));
    expect(list.data.map((t: { id: string }) => t.id)).toContain(body.widgetToken.id);
    expect(JSON.stringify(list)).not.toContain(body.token);
    expect((await json(await ts.api('/widget-tokens', { key: other.apiKey }))).data).toEqual([]);
  });

  it('validates the request', async () => {
    const cases: [Record<string, unknown>, number, string][] = [
      [{ appId: '00000000-0000-4000-8000-000000000000' }, 404, 'App not found in this workspace'],
      [{ appId: 'nope' }, 404, 'App not found in this workspace'],
      [
        { allowedOrigins: ['javascript:alert(1)'] },
        400,
        'Invalid origin "javascript:alert(1)": use scheme://host[:port]',
      ],
      [
        { allowedOrigins: ['https://a.example/path'] },
        400,
        'Invalid origin "https://a.example/path": use scheme://host[:port]',
      ],
      [{ ttlSeconds: 10 }, 400, 'ttlSeconds must be between 60 and 86400'],
      [{ ttlSeconds: 86401 }, 400, 'ttlSeconds must be between 60 and 86400'],
      [{ maxRequests: 0 }, 400, 'maxRequests must be between 1 and 100000'],
    ];
    for (const [body, status, error] of cases) {
      const r = await issue(body);
      expect(r.res.status, JSON.stringify(body)).toBe(status);
      expect(r.body.error).toBe(error);
    }
    // another workspace's app cannot be the scope
    expect((await issue({ appId }, other.apiKey)).res.status).toBe(404);
  });

  it('cannot be issued, listed or revoked with a widget token', async () => {
    const { body } = await issue({});
    for (const [method, path] of [
      ['POST', '/widget-tokens'],
      ['GET', '/widget-tokens'],
      ['DELETE', `/widget-tokens/${body.widgetToken.id}`],
    ] as const) {
      const res = await ts.api(path, { method, key: body.token, json: method === 'POST' ? {} : undefined });
      expect(res.status).toBe(401);
      expect(await json(res)).toEqual({ error: 'Invalid API key' });
    }
  });
});

describe('use', () => {
  it('is accepted by the Apps endpoints and refused everywhere else', async () => {
    const { body } = await issue({});
    const ok = await ts.api(`/apps/${appId}/memory/threads`, { key: body.token });
    expect(ok.status).toBe(200);
    const created = await ts.api(`/apps/${app2Id}/memory/threads`, {
      method: 'POST',
      key: body.token,
      json: { title: 'w' },
    });
    expect(created.status).toBe(201);
    for (const [method, path] of [
      ['GET', '/me'],
      ['POST', '/chat'],
      ['GET', '/apps'],
      ['POST', '/apps'],
      ['GET', `/apps/${appId}`],
      ['PATCH', `/apps/${appId}`],
      ['DELETE', `/apps/${appId}`],
    ] as const) {
      const res = await ts.api(path, {
        method,
        key: body.token,
        json:
          method === 'GET' || method === 'DELETE'
            ? undefined
            : { name: 'x', messages: [{ role: 'user', content: 'hi' }] },
      });
      expect(res.status, `${method} ${path}`).toBe(401);
      expect(await json(res)).toEqual({ error: 'Invalid API key' });
    }
    // the app still exists: the refused DELETE did nothing
    expect((await ts.api(`/apps/${appId}`, { key: ws.apiKey })).status).toBe(200);
  });

  it('an app-scoped token reaches only its app; a workspace token only its workspace', async () => {
    const scoped = (await issue({ appId })).body.token;
    expect((await ts.api(`/apps/${appId}/memory/status`, { key: scoped })).status).toBe(200);
    const res = await ts.api(`/apps/${app2Id}/memory/status`, { key: scoped });
    expect(res.status).toBe(401);
    expect(await json(res)).toEqual({ error: 'Unauthorized or app not found' });
    const foreign = (await issue({}, other.apiKey)).body.token;
    const f = await ts.api(`/apps/${appId}/memory/status`, { key: foreign });
    expect(f.status).toBe(401);
    expect(await json(f)).toEqual({ error: 'Unauthorized or app not found' });
  });

  it('is refused after revocation, after expiry, and when malformed', async () => {
    const { body } = await issue({ appId });
    const path = `/apps/${appId}/memory/status`;
    expect((await ts.api(path, { key: body.token })).status).toBe(200);
    const rev = await ts.api(`/widget-tokens/${body.widgetToken.id}`, { method: 'DELETE', key: ws.apiKey });
    expect(rev.status).toBe(200);
    expect((await json(rev)).widgetToken.revokedAt).toEqual(expect.any(String));
    const after = await ts.api(path, { key: body.token });
    expect(after.status).toBe(401);
    expect(await json(after)).toEqual({ error: 'Invalid widget token', code: 'WIDGET_TOKEN_INVALID' });
    // another workspace cannot revoke it
    const foreignRevoke = await ts.api(`/widget-tokens/${body.widgetToken.id}`, {
      method: 'DELETE',
      key: other.apiKey,
    });
    expect(foreignRevoke.status).toBe(404);

    const exp = await issue({ appId });
    expect((await ts.api(path, { key: exp.body.token })).status).toBe(200);
    await ts.server.deps
      .em()
      .execute(`update widget_tokens set expires_at = now() - interval '1 second' where id = ?`, [
        exp.body.widgetToken.id,
      ]);
    const expired = await ts.api(path, { key: exp.body.token });
    expect(expired.status).toBe(401);
    expect(await json(expired)).toEqual({ error: 'Widget token expired', code: 'WIDGET_TOKEN_EXPIRED' });

    const bad = await ts.api(path, { key: `svc_wt_${'a'.repeat(48)}` });
    expect(await json(bad)).toEqual({ error: 'Invalid widget token', code: 'WIDGET_TOKEN_INVALID' });
    const short = await ts.api(path, { key: 'svc_wt_short' });
    expect(short.status).toBe(401);
  });

  it('checks allowed origins against Origin', async () => {
    const { body } = await issue({
      appId,
      allowedOrigins: ['https://shop.example', 'http://localhost:3000'],
    });
    const path = `/apps/${appId}/memory/threads`;
    const good = await ts.api(path, { key: body.token, headers: { origin: 'https://shop.example' } });
    expect(good.status).toBe(200);
    expect(good.headers.get('access-control-allow-origin')).toBe('https://shop.example');
    for (const origin of [
      'https://evil.example',
      'https://shop.example.evil.example',
      'http://shop.example',
      undefined,
    ]) {
      const res = await ts.api(path, { key: body.token, headers: origin ? { origin } : {} });
      expect(res.status, String(origin)).toBe(403);
      expect(await json(res)).toEqual({ error: 'Origin not allowed', code: 'WIDGET_ORIGIN_NOT_ALLOWED' });
    }
  });

  it('enforces the per-token request cap, also under concurrency', async () => {
    const { body } = await issue({ appId, maxRequests: 5 });
    const path = `/apps/${appId}/memory/status`;
    const results = await Promise.all(Array.from({ length: 9 }, () => ts.api(path, { key: body.token })));
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429, 429]);
    const last = await ts.api(path, { key: body.token });
    expect(last.status).toBe(429);
    expect(await json(last)).toEqual({
      error: 'Widget token request limit reached',
      code: 'WIDGET_TOKEN_LIMIT_REACHED',
    });
    const listed = (await json(await ts.api('/widget-tokens', { key: ws.apiKey }))).data.find(
      (t: { id: string }) => t.id === body.widgetToken.id,
    );
    expect(listed.requestCount).toBe(5);
  });

  it('a subject-bound token sees only its end user threads', async () => {
    const alice = (await issue({ appId, subject: 'alice' })).body.token;
    const bob = (await issue({ appId, subject: 'bob' })).body.token;
    const a = await json(
      await ts.api(`/apps/${appId}/memory/threads`, {
        method: 'POST',
        key: alice,
        json: { metadata: { external_user_id: 'bob' } },
      }),
    );
    expect(a.data.metadata.external_user_id).toBe('alice');
    const b = await json(
      await ts.api(`/apps/${appId}/memory/threads`, { method: 'POST', key: bob, json: {} }),
    );
    const aliceList = await json(await ts.api(`/apps/${appId}/memory/threads?limit=100`, { key: alice }));
    expect(aliceList.data.map((t: { id: string }) => t.id)).toEqual([a.data.id]);
    const peek = await ts.api(`/apps/${appId}/memory/threads/${b.data.id}/messages`, { key: alice });
    expect(peek.status).toBe(404);
    const write = await ts.api(`/apps/${appId}/memory/save-messages`, {
      method: 'POST',
      key: alice,
      json: { threadId: b.data.id, messages: [{ role: 'user', content: 'x' }] },
    });
    expect(write.status).toBe(404);
    const status = await json(await ts.api(`/apps/${appId}/memory/status`, { key: alice }));
    expect(status.threadCount).toBe(1);
    // the API key sees both
    const all = await json(await ts.api(`/apps/${appId}/memory/threads?limit=100`, { key: ws.apiKey }));
    expect(all.data.map((t: { id: string }) => t.id)).toEqual(expect.arrayContaining([a.data.id, b.data.id]));
  });
});

describe('CORS on the Apps endpoints', () => {
  it('answers preflights and exposes the request id', async () => {
    const pre = await fetch(`${ts.url}/api/v1/apps/${appId}/chat/message/stream`, {
      method: 'OPTIONS',
      headers: {
        origin: 'https://shop.example',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type',
      },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get('access-control-allow-origin')).toBe('https://shop.example');
    expect(pre.headers.get('access-control-allow-headers')).toMatch(/Authorization/);
    expect(pre.headers.get('access-control-allow-methods')).toMatch(/POST/);
    const res = await ts.api(`/apps/${appId}/memory/status`, {
      key: ws.apiKey,
      headers: { origin: 'https://x.example' },
    });
    expect(res.headers.get('access-control-expose-headers')).toMatch(/X-Request-Id/);
  });

  it('is not offered on other endpoints', async () => {
    const pre = await fetch(`${ts.url}/api/v1/widget-tokens`, {
      method: 'OPTIONS',
      headers: { origin: 'https://shop.example', 'access-control-request-method': 'POST' },
    });
    expect(pre.headers.get('access-control-allow-origin')).toBeNull();
  });
});
