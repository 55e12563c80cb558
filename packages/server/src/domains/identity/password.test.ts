import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SESSION_COOKIE } from '../../auth/sessions.js';
import {
  createTestSession,
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { WorkspacesService } from '../workspaces/service.js';

let ts: TestServer;
let ws: TestWorkspace;
beforeAll(async () => {
  ts = await startTestServer({ env: { AUTH_SIGNIN_MAX_FAILURES_PER_ACCOUNT: '3' } });
  ws = await createTestWorkspace(ts);
});
afterAll(() => ts?.close());

const change = (token: string, body: unknown, headers: Record<string, string> = {}) =>
  ts.api('/auth/password', { method: 'POST', key: token, json: body, headers });

const signIn = (email: string, password: string) =>
  ts.api('/auth/sign-in', { method: 'POST', json: { email, password } });

describe('POST /auth/password', () => {
  it('changes the password and signs out every other session, keeping this one', async () => {
    const me = await createTestSession(ts, ws, { role: 'member' });
    const other = await signIn(me.email, me.password);
    const otherToken = ((await other.json()) as { token: string }).token;
    const res = await change(me.token, { currentPassword: me.password, newPassword: 'a brand new secret' });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ passwordChanged: true, sessionsRevoked: 1 });
    expect((await ts.api('/auth/session', { key: me.token })).status).toBe(200);
    expect((await ts.api('/auth/session', { key: otherToken })).status).toBe(401);
    expect((await signIn(me.email, me.password)).status).toBe(401);
    expect((await signIn(me.email, 'a brand new secret')).status).toBe(200);
  });

  it('refuses a wrong current password (counted like a failed sign-in) and a weak new one', async () => {
    const me = await createTestSession(ts, ws, { role: 'member' });
    const weak = await change(me.token, { currentPassword: me.password, newPassword: 'short' });
    expect(weak.status).toBe(400);
    expect(await weak.json()).toMatchObject({ code: 'WEAK_PASSWORD' });
    for (let i = 0; i < 3; i++) {
      const wrong = await change(me.token, {
        currentPassword: `${me.password}x`,
        newPassword: 'long enough pw',
      });
      expect(wrong.status).toBe(400);
      expect(await wrong.json()).toEqual({
        error: 'currentPassword is incorrect',
        code: 'INVALID_CURRENT_PASSWORD',
      });
    }
    // The account's failures are used up: even the right password waits now.
    const throttled = await change(me.token, { currentPassword: me.password, newPassword: 'long enough pw' });
    expect(throttled.status).toBe(429);
    expect(throttled.headers.get('retry-after')).toMatch(/^\d+$/);
    expect((await signIn(me.email, me.password)).status).toBe(429);
  });

  it('validates the body', async () => {
    const me = await createTestSession(ts, ws, { role: 'member' });
    const res = await change(me.token, { newPassword: 'long enough pw' });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: 'currentPassword is required' });
  });

  it('an account without a password (OIDC only) has none to change: 400 NO_PASSWORD', async () => {
    const em = ts.server.deps.em();
    const email = `sso-only-${Date.now()}@example.com`;
    expect((await new WorkspacesService(em).ensureUser(email)).created).toBe(true);
    const me = await createTestSession(ts, ws, { email, role: 'member' });
    const res = await change(me.token, { currentPassword: 'anything at all', newPassword: 'long enough pw' });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: 'NO_PASSWORD' });
  });

  it('takes a session only; a cookie session needs a trusted origin', async () => {
    const me = await createTestSession(ts, ws, { role: 'owner' });
    const body = { currentPassword: me.password, newPassword: 'another new secret' };
    const withKey = await change(ws.apiKey, body);
    expect(withKey.status).toBe(401);
    const crossSite = await ts.api('/auth/password', {
      method: 'POST',
      json: body,
      headers: { cookie: `${SESSION_COOKIE}=${me.token}`, origin: 'https://evil.example' },
    });
    expect(crossSite.status).toBe(403);
    expect(await crossSite.json()).toMatchObject({ code: 'CSRF_REJECTED' });
    const sameSite = await ts.api('/auth/password', {
      method: 'POST',
      json: body,
      headers: { cookie: `${SESSION_COOKIE}=${me.token}`, origin: ts.url },
    });
    expect(sameSite.status).toBe(200);
  });
});
