import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SESSION_COOKIE } from '../../auth/sessions.js';
import {
  createTestSession,
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestSession,
  type TestWorkspace,
} from '../../test/harness.js';
import { WorkspacesService } from '../workspaces/service.js';

let ts: TestServer;
let ws: TestWorkspace;
let other: TestWorkspace;
beforeAll(async () => {
  ts = await startTestServer();
  ws = await createTestWorkspace(ts, { name: 'Sessions A' });
  other = await createTestWorkspace(ts, { name: 'Sessions B' });
});
afterAll(() => ts?.close());

const signIn = (body: unknown, headers: Record<string, string> = {}) =>
  ts.api('/auth/sign-in', { method: 'POST', json: body, headers });

/** The `aisuite_session` value of a response's Set-Cookie, and its attributes. */
function sessionCookie(res: Response): { value: string; attributes: string } | undefined {
  const line = res.headers.getSetCookie().find((c) => c.startsWith(`${SESSION_COOKIE}=`));
  if (!line) return undefined;
  const [pair, ...attrs] = line.split(';');
  return { value: (pair ?? '').slice(SESSION_COOKIE.length + 1), attributes: attrs.join(';').trim() };
}

const withCookie = (token: string, extra: Record<string, string> = {}) => ({
  cookie: `${SESSION_COOKIE}=${token}`,
  ...extra,
});

async function member(role: 'owner' | 'admin' | 'member' = 'member', w: TestWorkspace = ws) {
  return createTestSession(ts, w, { role });
}

describe('sign-in with email and password', () => {
  it('opens a session usable as a bearer token and as an HTTP-only SameSite=Lax cookie', async () => {
    const s = await member('admin');
    // A browser on the service's own origin (the web console).
    const res = await signIn({ email: s.email.toUpperCase(), password: s.password }, { origin: ts.url });
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      token: string;
      session: { id: string; method: string; expiresAt: string; idleExpiresAt: string };
      user: { id: string; email: string };
      workspace: { id: string; name: string; role: string };
      workspaces: unknown[];
    };
    expect(body.token).toMatch(/^svc_ss_[A-Za-z0-9]{48}$/);
    expect(body).toMatchObject({
      session: { method: 'password' },
      user: { id: s.userId, email: s.email },
      workspace: { id: ws.workspaceId, name: 'Sessions A', role: 'admin' },
      workspaces: [{ id: ws.workspaceId, name: 'Sessions A', role: 'admin' }],
    });
    const cookie = sessionCookie(res);
    expect(cookie?.value).toBe(body.token);
    expect(cookie?.attributes).toMatch(/HttpOnly/);
    expect(cookie?.attributes).toMatch(/SameSite=Lax/);
    expect(cookie?.attributes).toMatch(/Path=\//);
    expect(cookie?.attributes).not.toMatch(/Secure/); // plain http here
    expect(new Date(body.session.expiresAt).getTime()).toBeGreaterThan(Date.now() + 29 * 86_400_000);

    const viaBearer = await ts.api('/auth/session', { key: body.token });
    expect(viaBearer.status).toBe(200);
    expect(await viaBearer.json()).toMatchObject({
      session: { id: body.session.id },
      user: { id: s.userId },
    });
    const viaCookie = await ts.api('/auth/session', { headers: withCookie(body.token) });
    expect(viaCookie.status).toBe(200);
    expect(await viaCookie.json()).toMatchObject({ session: { id: body.session.id } });
  });

  it('stores only a hash of the session token', async () => {
    const s = await member();
    const rows = await ts.server.deps
      .em()
      .execute<{ n: number }[]>(
        "select count(*)::int as n from user_sessions where token_hash = ? or token_hash = encode(sha256(?::bytea), 'hex')",
        [s.token, s.token],
      );
    expect(rows[0]?.n).toBe(1); // found by its SHA-256, never by the plaintext
  });

  it('gives an unknown email and a wrong password the same answer', async () => {
    const s = await member();
    const wrong = await signIn({ email: s.email, password: `${s.password}x` });
    const unknown = await signIn({ email: `nobody-${s.email}`, password: s.password });
    expect(wrong.status).toBe(401);
    expect(unknown.status).toBe(401);
    const a = await wrong.json();
    expect(a).toEqual({ error: 'Invalid email or password', code: 'INVALID_CREDENTIALS' });
    expect(await unknown.json()).toEqual(a);
    expect(sessionCookie(wrong)).toBeUndefined();
    // A user without a password (OIDC only) cannot sign in with any password either.
    const oidcOnly = await new WorkspacesService(ts.server.deps.em()).ensureUser(`sso-${s.email}`);
    expect(oidcOnly.created).toBe(true);
    const none = await signIn({ email: `sso-${s.email}`, password: 'anything-at-all' });
    expect(none.status).toBe(401);
    expect(await none.json()).toEqual(a);
  });

  it('validates the body', async () => {
    const cases: [unknown, string][] = [
      [{ password: 'x' }, 'email is required'],
      [{ email: 'a@b.c' }, 'password is required'],
      [{ email: '', password: 'x' }, 'email is required'],
    ];
    for (const [body, message] of cases) {
      const res = await signIn(body);
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toBe(message);
    }
  });

  it('acts in the workspace asked for, and only one of the user’s', async () => {
    const s = await member('member');
    const svc = new WorkspacesService(ts.server.deps.em());
    await svc.ensureMembership(other.workspaceId, s.userId, 'admin');
    const res = await signIn({ email: s.email, password: s.password, workspaceId: other.workspaceId });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ workspace: { id: other.workspaceId, role: 'admin' } });

    const stranger = await createTestWorkspace(ts);
    const denied = await signIn({ email: s.email, password: s.password, workspaceId: stranger.workspaceId });
    expect(denied.status).toBe(403);
    expect(await denied.json()).toEqual({
      error: 'Access denied to workspace',
      code: 'WORKSPACE_ACCESS_DENIED',
    });
  });

  it('revokes the session the request carried (no session fixation)', async () => {
    const s = await member();
    const res = await signIn({ email: s.email, password: s.password }, withCookie(s.token));
    expect(res.status).toBe(200);
    expect((await ts.api('/auth/session', { key: s.token })).status).toBe(401);
  });
});

describe('the session principal', () => {
  let s: TestSession;
  beforeAll(async () => {
    s = await member('member');
  });

  it('is accepted by storage, as bearer and cookie, in its own workspace only', async () => {
    const path = `/workspaces/${ws.workspaceId}/storage`;
    expect((await ts.api(path, { key: s.token })).status).toBe(200);
    expect((await ts.api(path, { headers: withCookie(s.token) })).status).toBe(200);
    const foreign = await ts.api(`/workspaces/${other.workspaceId}/storage`, { key: s.token });
    expect(foreign.status).toBe(401);
    expect(await foreign.json()).toEqual({ error: 'Unauthorized' });
  });

  it('is refused by API-key-only routes, and a key by session-only routes', async () => {
    const agents = await ts.api('/managed-agents/agents', { key: s.token });
    expect(agents.status).toBe(401);
    expect(await agents.json()).toEqual({ error: 'Invalid API key' });
    const cookieAgents = await ts.api('/managed-agents/agents', { headers: withCookie(s.token) });
    expect(cookieAgents.status).toBe(401);
    const keyOnSession = await ts.api('/auth/session', { key: ws.apiKey });
    expect(keyOnSession.status).toBe(401);
    expect(await keyOnSession.json()).toEqual({ error: 'Authentication required' });
    const none = await ts.api('/auth/session');
    expect(none.status).toBe(401);
    expect(await none.json()).toEqual({ error: 'Authentication required' });
  });

  it('with a cookie, changes state only from a trusted origin (CSRF)', async () => {
    const path = `/workspaces/${ws.workspaceId}/storage/folders`;
    const post = (headers: Record<string, string>, folderPath: string) =>
      ts.api(path, { method: 'POST', json: { folderPath }, headers: withCookie(s.token, headers) });
    const refused = { error: 'Cross-site request refused', code: 'CSRF_REJECTED' };
    const none = await post({}, '/csrf-none');
    expect(none.status).toBe(403);
    expect(await none.json()).toEqual(refused);
    const evil = await post({ origin: 'https://evil.example' }, '/csrf-evil');
    expect(evil.status).toBe(403);
    expect(await evil.json()).toEqual(refused);
    expect((await post({ origin: 'null' }, '/csrf-null')).status).toBe(403);
    expect((await post({ referer: 'https://evil.example/page' }, '/csrf-referer')).status).toBe(403);
    expect((await post({ origin: ts.url }, '/csrf-ok')).status).toBe(201);
    expect((await post({ referer: `${ts.url}/console/storage` }, '/csrf-ok-referer')).status).toBe(201);
    // Nothing was created by the refused requests.
    const listing = (await (
      await ts.api(`/workspaces/${ws.workspaceId}/storage/path?tree=1`, { key: s.token })
    ).json()) as { paths: string[] };
    expect(listing.paths.filter((p) => p.startsWith('/csrf')).sort()).toEqual([
      '/csrf-ok-referer/',
      '/csrf-ok/',
    ]);
    // A bearer session needs no origin: a browser never sends it on its own.
    const bearer = await ts.api(path, { method: 'POST', key: s.token, json: { folderPath: '/bearer-ok' } });
    expect(bearer.status).toBe(201);
  });

  it('loses its workspace when the membership goes (403 NO_ACTIVE_WORKSPACE)', async () => {
    const gone = await member('member');
    await ts.server.deps
      .em()
      .execute('delete from memberships where workspace_id = ? and user_id = ?', [
        ws.workspaceId,
        gone.userId,
      ]);
    const res = await ts.api(`/workspaces/${ws.workspaceId}/storage`, { key: gone.token });
    expect(res.status).toBe(403);
    expect(await res.json()).toMatchObject({ code: 'NO_ACTIVE_WORKSPACE' });
    const me = await ts.api('/auth/session', { key: gone.token });
    expect(me.status).toBe(200);
    expect(await me.json()).toMatchObject({ workspace: null, workspaces: [] });
  });
});

describe('session lifetime', () => {
  const em = () => ts.server.deps.em();

  it('ends after the absolute lifetime', async () => {
    const s = await member();
    await em().execute("update user_sessions set expires_at = now() - interval '1 second' where id = ?", [
      s.sessionId,
    ]);
    const res = await ts.api('/auth/session', { key: s.token });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Authentication required', code: 'SESSION_INVALID' });
  });

  it('ends when unused for the idle timeout, and use keeps it alive', async () => {
    const idle = await member();
    const used = await member();
    // Both last seen just under the 7-day idle timeout ago.
    await em().execute(
      "update user_sessions set last_seen_at = now() - interval '7 days' + interval '30 seconds' where id in (?, ?)",
      [idle.sessionId, used.sessionId],
    );
    expect((await ts.api('/auth/session', { key: used.token })).status).toBe(200);
    // The use was recorded off the request path; wait for it.
    await expect
      .poll(async () => {
        const rows = await em().execute<{ fresh: boolean }[]>(
          "select last_seen_at > now() - interval '1 minute' as fresh from user_sessions where id = ?",
          [used.sessionId],
        );
        return rows[0]?.fresh;
      })
      .toBe(true);
    await em().execute(
      "update user_sessions set last_seen_at = last_seen_at - interval '1 minute' where id = ?",
      [idle.sessionId],
    );
    expect((await ts.api('/auth/session', { key: idle.token })).status).toBe(401);
    expect((await ts.api('/auth/session', { key: used.token })).status).toBe(200);
  });
});

describe('sign-out, sessions list and revocation', () => {
  it('sign-out revokes the session and clears the cookie', async () => {
    const s = await member();
    const res = await ts.api('/auth/sign-out', { method: 'POST', key: s.token, json: {} });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ signedOut: true });
    const cleared = sessionCookie(res);
    expect(cleared?.value).toBe('');
    expect(cleared?.attributes).toMatch(/Expires=Thu, 01 Jan 1970/);
    expect((await ts.api('/auth/session', { key: s.token })).status).toBe(401);
    expect((await ts.api('/auth/sign-out', { method: 'POST', key: s.token, json: {} })).status).toBe(401);
  });

  it('sign-out with a cookie needs a trusted origin', async () => {
    const s = await member();
    const refused = await ts.api('/auth/sign-out', {
      method: 'POST',
      json: {},
      headers: withCookie(s.token),
    });
    expect(refused.status).toBe(403);
    const ok = await ts.api('/auth/sign-out', {
      method: 'POST',
      json: {},
      headers: withCookie(s.token, { origin: ts.url }),
    });
    expect(ok.status).toBe(200);
  });

  it('lists the user’s live sessions and revokes one of them, never another user’s', async () => {
    const s = await member();
    const second = (await (await signIn({ email: s.email, password: s.password })).json()) as {
      token: string;
      session: { id: string };
    };
    const list = await ts.api('/auth/sessions', { key: s.token });
    expect(list.status).toBe(200);
    const { sessions } = (await list.json()) as { sessions: { id: string; current: boolean; ip: string }[] };
    expect(sessions.map((x) => x.id).sort()).toEqual([s.sessionId, second.session.id].sort());
    expect(sessions.find((x) => x.id === s.sessionId)?.current).toBe(true);
    expect(sessions.find((x) => x.id === second.session.id)?.current).toBe(false);

    const someoneElse = await member();
    const foreign = await ts.api(`/auth/sessions/${someoneElse.sessionId}`, {
      method: 'DELETE',
      key: s.token,
    });
    expect(foreign.status).toBe(404);
    expect(await foreign.json()).toEqual({ error: 'Session not found' });
    expect((await ts.api('/auth/session', { key: someoneElse.token })).status).toBe(200);
    expect((await ts.api('/auth/sessions/not-a-uuid', { method: 'DELETE', key: s.token })).status).toBe(404);

    const revoked = await ts.api(`/auth/sessions/${second.session.id}`, { method: 'DELETE', key: s.token });
    expect(revoked.status).toBe(200);
    expect(await revoked.json()).toEqual({ revoked: true, sessionId: second.session.id });
    expect((await ts.api('/auth/session', { key: second.token })).status).toBe(401);
    expect((await ts.api('/auth/session', { key: s.token })).status).toBe(200);
  });
});

describe('switching workspace', () => {
  it('rotates the token and acts in the new workspace; the old token stops working', async () => {
    const s = await member('owner');
    await new WorkspacesService(ts.server.deps.em()).ensureMembership(other.workspaceId, s.userId, 'member');
    const res = await ts.api('/auth/workspace', {
      method: 'POST',
      key: s.token,
      json: { workspaceId: other.workspaceId },
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      token: string;
      session: { id: string };
      workspace: { id: string; role: string };
    };
    expect(body.session.id).toBe(s.sessionId);
    expect(body.workspace).toMatchObject({ id: other.workspaceId, role: 'member' });
    expect(body.token).not.toBe(s.token);
    // A program (bearer token, no Origin) gets the token only; a browser would get the cookie.
    expect(sessionCookie(res)).toBeUndefined();
    expect((await ts.api('/auth/session', { key: s.token })).status).toBe(401);
    expect((await ts.api(`/workspaces/${other.workspaceId}/storage`, { key: body.token })).status).toBe(200);
    expect((await ts.api(`/workspaces/${ws.workspaceId}/storage`, { key: body.token })).status).toBe(401);
  });

  it('refuses a workspace the user is not a member of', async () => {
    const s = await member('owner');
    const res = await ts.api('/auth/workspace', {
      method: 'POST',
      key: s.token,
      json: { workspaceId: other.workspaceId },
    });
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({
      error: 'Access denied to workspace',
      code: 'WORKSPACE_ACCESS_DENIED',
    });
    expect((await ts.api('/auth/session', { key: s.token })).status).toBe(200);
  });
});
