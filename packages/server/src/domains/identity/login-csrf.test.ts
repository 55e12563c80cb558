import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SESSION_COOKIE } from '../../auth/sessions.js';
import {
  createTestSession,
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

/**
 * Login CSRF: another site must not be able to sign a visitor's browser in (to an account of
 * the attacker's choosing) through a form or fetch POST. Every request that opens a session and
 * would set its cookie is refused from an origin outside PUBLIC_BASE_URL / AUTH_TRUSTED_ORIGINS,
 * before any work; programs that name no origin get the token without a cookie.
 */
const TRUSTED = 'https://console.example.com';
const EVIL = 'https://evil.example.net';

let ts: TestServer;
let ws: TestWorkspace;

beforeAll(async () => {
  ts = await startTestServer({
    env: {
      PUBLIC_BASE_URL: 'https://ai.example.com',
      AUTH_TRUSTED_ORIGINS: TRUSTED,
      AUTH_SIGNUP_ENABLED: 'true',
    },
  });
  ws = await createTestWorkspace(ts, { name: 'Login CSRF' });
});
afterAll(() => ts?.close());

const post = (path: string, json: unknown, headers: Record<string, string> = {}) =>
  ts.api(path, { method: 'POST', json, headers });
const cookieOf = (res: Response) =>
  res.headers.getSetCookie().find((c) => c.startsWith(`${SESSION_COOKIE}=`));
const count = async (sql: string, params: unknown[]) =>
  Number((await ts.server.deps.em().execute<{ n: string }[]>(sql, params))[0]?.n);
const REFUSED = {
  error: 'Sign-in from an untrusted origin refused: add it to AUTH_TRUSTED_ORIGINS if it is yours',
  code: 'CSRF_REJECTED',
};

describe('sign-in from another site', () => {
  it('is refused with 403 before anything happens: no session, no cookie, no failure counted', async () => {
    const s = await createTestSession(ts, ws);
    const sessionsBefore = await count('select count(*) as n from user_sessions where user_id = ?', [
      s.userId,
    ]);
    const variants: Record<string, string>[] = [
      { origin: EVIL },
      { origin: 'null' }, // sandboxed frames, data: URLs
      { referer: `${EVIL}/login.html` }, // a browser that left Origin out
      { origin: 'https://ai.example.com.evil.example.net' },
    ];
    for (const headers of variants) {
      const res = await post('/auth/sign-in', { email: s.email, password: s.password }, headers);
      expect(res.status, JSON.stringify(headers)).toBe(403);
      const body = (await res.json()) as typeof REFUSED & { details: { origin: string } };
      expect(body).toMatchObject(REFUSED);
      expect(cookieOf(res)).toBeUndefined();
    }
    expect(await count('select count(*) as n from user_sessions where user_id = ?', [s.userId])).toBe(
      sessionsBefore,
    );
    // A wrong password from another site is refused the same way and not counted as a failure.
    const wrong = await post('/auth/sign-in', { email: s.email, password: 'nope-nope' }, { origin: EVIL });
    expect(wrong.status).toBe(403);
    expect(await count('select count(*) as n from sign_in_failures', [])).toBe(0);
  });

  it('sets the cookie for PUBLIC_BASE_URL and AUTH_TRUSTED_ORIGINS, and gives programs the token only', async () => {
    const s = await createTestSession(ts, ws);
    for (const origin of ['https://ai.example.com', TRUSTED]) {
      const res = await post('/auth/sign-in', { email: s.email, password: s.password }, { origin });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { token: string };
      expect(cookieOf(res)).toContain(`${SESSION_COOKIE}=${body.token}`);
    }
    const program = await post('/auth/sign-in', { email: s.email, password: s.password });
    expect(program.status).toBe(200);
    const { token } = (await program.json()) as { token: string };
    expect(cookieOf(program)).toBeUndefined();
    expect((await ts.api('/auth/session', { key: token })).status).toBe(200);
  });
});

describe('every other request that opens a session', () => {
  it('sign-up: refused from another site, no account created', async () => {
    const email = `csrf-${Date.now()}@example.com`;
    const body = { email, password: 'a long enough password', workspaceName: `CSRF ${Date.now()}` };
    const refused = await post('/auth/sign-up', body, { origin: EVIL });
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject(REFUSED);
    expect(await count('select count(*) as n from users where lower(email) = ?', [email])).toBe(0);
    const ok = await post('/auth/sign-up', body, { origin: TRUSTED });
    expect(ok.status).toBe(201);
    expect(cookieOf(ok)).toBeDefined();
  });

  it('invitation accept: refused from another site, the link still unused', async () => {
    const owner = await createTestSession(ts, ws, { role: 'owner' });
    const email = `invited-${Date.now()}@example.com`;
    const inv = await ts.api(`/workspaces/${ws.workspaceId}/invitations`, {
      method: 'POST',
      key: owner.token,
      json: { email },
    });
    expect(inv.status).toBe(201);
    const { token } = (await inv.json()) as { token: string };
    const refused = await post(
      '/auth/invitations/accept',
      { token, password: 'a long enough password' },
      { origin: EVIL },
    );
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject(REFUSED);
    expect(await count('select count(*) as n from users where lower(email) = ?', [email])).toBe(0);
    const ok = await post(
      '/auth/invitations/accept',
      { token, password: 'a long enough password' },
      { origin: TRUSTED },
    );
    expect(ok.status).toBe(200);
    expect(cookieOf(ok)).toBeDefined();
  });

  it('workspace switch with a bearer token from another site: refused, the token unchanged', async () => {
    const s = await createTestSession(ts, ws);
    const res = await ts.api('/auth/workspace', {
      method: 'POST',
      key: s.token,
      headers: { origin: EVIL },
      json: { workspaceId: ws.workspaceId },
    });
    expect(res.status).toBe(403);
    expect((await ts.api('/auth/session', { key: s.token })).status).toBe(200);
  });
});
