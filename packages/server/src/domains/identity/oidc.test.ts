import { randomBytes } from 'node:crypto';
import { type FakeOidc, type FakeOidcMisbehaviour, fakeOidcEnv, startFakeOidc } from '@ai-suite/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { OIDC_STATE_COOKIE, safeReturnTo } from '../../auth/oidc.js';
import { SESSION_COOKIE } from '../../auth/sessions.js';
import {
  createTestSession,
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

/**
 * OIDC sign-in end to end over HTTP: the server's start and callback routes against the fake
 * provider of the testkit (real discovery, authorization, token endpoint with PKCE, JWKS and
 * RS256-signed ID tokens). The browser is played by fetch with manual redirects and a cookie
 * jar of one cookie per name.
 */

let fake: FakeOidc;
/** OIDC configured, sign-up disabled (the default). */
let ts: TestServer;
/** The same database, sign-up enabled and an email domain allow-list. */
let open: TestServer;
/** The same database, no OIDC settings. */
let plain: TestServer;
let ws: TestWorkspace;

const DOMAIN = 'allowed.example';

beforeAll(async () => {
  fake = await startFakeOidc({ clientSecret: 'fake-oidc-secret' });
  ts = await startTestServer({ env: { ...fakeOidcEnv(fake), OIDC_PROVIDER_NAME: 'Test IdP' } });
  open = await startTestServer({
    db: ts.db,
    env: {
      ...fakeOidcEnv(fake),
      AUTH_SIGNUP_ENABLED: 'true',
      OIDC_ALLOWED_DOMAINS: `@${DOMAIN.toUpperCase()}`,
    },
  });
  plain = await startTestServer({ db: ts.db });
  ws = await createTestWorkspace(ts, { name: `OIDC ${randomBytes(3).toString('hex')}` });
});
afterAll(async () => {
  await plain?.close();
  await open?.close();
  await ts?.close();
  await fake?.close();
});
afterEach(() => fake.misbehave({}));

const uniq = () => randomBytes(4).toString('hex');

/** A provider account (verified email unless told). */
function providerUser(opts: { email?: string; verified?: boolean; name?: string } = {}) {
  const sub = `sub-${uniq()}`;
  const email = opts.email ?? `p-${uniq()}@example.com`;
  fake.addUser({ sub, email, email_verified: opts.verified ?? true, name: opts.name });
  return { sub, email };
}

type Jar = Map<string, string>;

function store(jar: Jar, res: Response) {
  for (const line of res.headers.getSetCookie()) {
    const [pair, ...attrs] = line.split(';');
    const eq = (pair ?? '').indexOf('=');
    const name = (pair ?? '').slice(0, eq).trim();
    const value = (pair ?? '').slice(eq + 1).trim();
    const expired = attrs.some((a) => /^\s*expires=thu, 01 jan 1970/i.test(a));
    if (expired || value === '') jar.delete(name);
    else jar.set(name, value);
  }
}

const cookieHeader = (jar: Jar) => [...jar].map(([k, v]) => `${k}=${v}`).join('; ');

/** What a browser's navigation sends (Chromium's Accept); API callers send none or JSON. */
const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8';

async function get(url: string, jar: Jar, accept?: string): Promise<Response> {
  const headers: Record<string, string> = {};
  if (accept) headers.accept = accept;
  if (jar.size > 0) headers.cookie = cookieHeader(jar);
  const res = await fetch(url, { redirect: 'manual', headers });
  store(jar, res);
  return res;
}

interface Flow {
  /** The start answer (302 to the provider, or the error). */
  start: Response;
  /** The callback URL the provider redirected to. */
  callbackUrl?: string;
  /** The callback's answer. */
  callback?: Response;
  jar: Jar;
}

/** Starts a sign-in and follows it through the provider to the callback, as a browser would. */
async function signIn(
  server: TestServer,
  opts: { returnTo?: string; loginHint?: string; jar?: Jar; accept?: string } = {},
): Promise<Flow> {
  const jar = opts.jar ?? new Map<string, string>();
  const q = new URLSearchParams();
  if (opts.returnTo !== undefined) q.set('returnTo', opts.returnTo);
  if (opts.loginHint !== undefined) q.set('loginHint', opts.loginHint);
  const start = await get(`${server.url}/api/v1/auth/oidc/start?${q}`, jar, opts.accept);
  if (start.status !== 302) return { start, jar };
  const authorize = await get(start.headers.get('location') as string, jar, opts.accept);
  expect(authorize.status).toBe(302);
  const callbackUrl = authorize.headers.get('location') as string;
  const callback = await get(callbackUrl, jar, opts.accept);
  return { start, callbackUrl, callback, jar };
}

async function errorOf(res: Response | undefined) {
  return (await res?.json()) as { error: string; code?: string; details?: Record<string, unknown> };
}

async function sessionOf(server: TestServer, jar: Jar) {
  const token = jar.get(SESSION_COOKIE);
  if (!token) return undefined;
  const res = await server.api('/auth/session', { headers: { cookie: `${SESSION_COOKIE}=${token}` } });
  if (res.status !== 200) return undefined;
  return (await res.json()) as {
    session: { id: string; method: string };
    user: { id: string; email: string; name: string | null };
    workspace: { id: string; role: string } | null;
    workspaces: { id: string; role: string }[];
  };
}

const count = async (sql: string, params: unknown[]) =>
  Number(
    (
      await ts.server.deps.em().execute<{ n: number }[]>(`select count(*)::int as n from (${sql}) q`, params)
    )[0]?.n,
  );

describe('providers', () => {
  it('tells the sign-in page whether OIDC is configured, and its name and start URL', async () => {
    const res = await ts.api('/auth/providers');
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      password: true,
      signUp: false,
      oidc: { name: 'Test IdP', startUrl: '/api/v1/auth/oidc/start' },
    });
    expect(await (await open.api('/auth/providers')).json()).toEqual({
      password: true,
      signUp: true,
      oidc: { name: '127.0.0.1', startUrl: '/api/v1/auth/oidc/start' },
    });
    expect(await (await plain.api('/auth/providers')).json()).toEqual({
      password: true,
      signUp: false,
      oidc: null,
    });
  });

  it('answers 404 OIDC_NOT_CONFIGURED on the OIDC routes of a server without OIDC settings', async () => {
    for (const path of ['/auth/oidc/start', '/auth/oidc/callback?code=x&state=y']) {
      const res = await plain.api(path, { redirect: 'manual' });
      expect(res.status).toBe(404);
      expect(await res.json()).toMatchObject({ code: 'OIDC_NOT_CONFIGURED' });
    }
  });
});

describe('the authorization-code flow', () => {
  it('links an existing account by its verified email, opens a session and returns to returnTo', async () => {
    const person = await createTestSession(ts, ws, { role: 'admin' });
    const { sub } = providerUser({ email: person.email.toUpperCase() });
    const flow = await signIn(ts, { returnTo: '/console/keys?tab=1#top', loginHint: sub });

    // Start: 302 to the provider with PKCE S256, state and nonce; the pending sign-in in a cookie.
    expect(flow.start.status).toBe(302);
    const authorize = new URL(flow.start.headers.get('location') as string);
    expect(`${authorize.origin}${authorize.pathname}`).toBe(`${fake.issuer}/authorize`);
    const p = authorize.searchParams;
    expect(p.get('response_type')).toBe('code');
    expect(p.get('client_id')).toBe(fake.clientId);
    expect(p.get('redirect_uri')).toBe(`${ts.url}/api/v1/auth/oidc/callback`);
    expect(p.get('scope')).toBe('openid email profile');
    expect(p.get('code_challenge_method')).toBe('S256');
    expect(p.get('code_challenge')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(p.get('state')?.length).toBeGreaterThanOrEqual(32);
    expect(p.get('nonce')?.length).toBeGreaterThanOrEqual(32);
    expect(p.get('login_hint')).toBe(sub);
    const stateCookie = flow.start.headers.getSetCookie().find((c) => c.startsWith(`${OIDC_STATE_COOKIE}=`));
    expect(stateCookie).toMatch(/HttpOnly/);
    expect(stateCookie).toMatch(/SameSite=Lax/);
    expect(stateCookie).toMatch(/Max-Age=600/);
    // Sealed: neither the state nor the verifier is readable in it.
    expect(stateCookie).not.toContain(p.get('state') as string);

    // Callback: 302 to returnTo with the session cookie; the state cookie is cleared.
    expect(flow.callback?.status).toBe(302);
    expect(flow.callback?.headers.get('location')).toBe('/console/keys?tab=1#top');
    expect(flow.jar.has(OIDC_STATE_COOKIE)).toBe(false);
    const sessionCookie = flow.callback?.headers
      .getSetCookie()
      .find((c) => c.startsWith(`${SESSION_COOKIE}=`));
    expect(sessionCookie).toMatch(/HttpOnly/);
    expect(sessionCookie).toMatch(/SameSite=Lax/);
    // The token request carried the client secret and the PKCE verifier the challenge came from.
    const tokenRequest = fake.tokenRequests.at(-1);
    expect(tokenRequest?.ok).toBe(true);
    expect(tokenRequest?.params.get('code_verifier')).toMatch(/^[A-Za-z0-9_-]{43,128}$/);

    const session = await sessionOf(ts, flow.jar);
    expect(session).toMatchObject({
      session: { method: 'oidc' },
      user: { id: person.userId, email: person.email },
      workspace: { id: ws.workspaceId, role: 'admin' },
    });
    expect(
      await count('select 1 from user_identities where user_id = ? and issuer = ? and subject = ?', [
        person.userId,
        fake.issuer,
        sub,
      ]),
    ).toBe(1);

    // The session works on a workspace route of /api/v1 (storage takes sessions) and on the
    // console's mount, by its cookie like a browser.
    const cookie = `${SESSION_COOKIE}=${flow.jar.get(SESSION_COOKIE)}`;
    const storage = await ts.api(`/workspaces/${ws.workspaceId}/storage`, { headers: { cookie } });
    expect(storage.status).toBe(200);
    const consoleMembers = await fetch(`${ts.url}/console-api/v1/workspaces/${ws.workspaceId}/members`, {
      headers: { cookie },
    });
    expect(consoleMembers.status).toBe(200);
    // The password still works too: linking adds a way in, it takes none away.
    const pw = await ts.api('/auth/sign-in', {
      method: 'POST',
      json: { email: person.email, password: person.password },
    });
    expect(pw.status).toBe(200);
  });

  it('signs a linked identity in again as the same user, whatever email the provider now gives', async () => {
    const person = await createTestSession(ts, ws, { role: 'member' });
    const { sub } = providerUser({ email: person.email });
    expect((await signIn(ts, { loginHint: sub })).callback?.status).toBe(302);
    // The provider changes the person's email: the subject, not the email, identifies them.
    const renamed = `renamed-${uniq()}@example.com`;
    fake.addUser({ sub, email: renamed, email_verified: true });
    const again = await signIn(ts, { loginHint: sub });
    expect(again.callback?.status).toBe(302);
    expect(again.callback?.headers.get('location')).toBe('/');
    expect((await sessionOf(ts, again.jar))?.user.id).toBe(person.userId);
  });

  it('revokes a session the browser carried before (session fixation)', async () => {
    const planted = await createTestSession(ts, ws, { role: 'member' });
    const person = await createTestSession(ts, ws, { role: 'member' });
    const { sub } = providerUser({ email: person.email });
    const jar: Jar = new Map([[SESSION_COOKIE, planted.token]]);
    const flow = await signIn(ts, { loginHint: sub, jar });
    expect(flow.callback?.status).toBe(302);
    expect(flow.jar.get(SESSION_COOKIE)).not.toBe(planted.token);
    expect((await ts.api('/auth/session', { key: planted.token })).status).toBe(401);
    expect((await sessionOf(ts, flow.jar))?.user.id).toBe(person.userId);
  });
});

describe('hostile callbacks are refused', () => {
  const tokenCases: [string, FakeOidcMisbehaviour, RegExp][] = [
    ['a wrong nonce', { nonce: 'wrong' }, /"nonce" claim value/],
    ['no nonce', { nonce: 'missing' }, /"nonce" .*claim missing/],
    ['a wrong issuer', { wrongIssuer: true }, /"iss" \(issuer\) claim value/],
    ['a wrong audience', { wrongAudience: true }, /"aud" \(audience\) claim value/],
    ['a signature by a key not in the JWKS', { foreignKey: true }, /signature verification failed/],
    ['an expired ID token', { expired: true }, /"exp" \(expiration time\)/],
  ];
  for (const [what, misbehaviour, reason] of tokenCases) {
    it(`an ID token with ${what}: 401 OIDC_TOKEN_INVALID, no session`, async () => {
      const person = await createTestSession(ts, ws, { role: 'member' });
      const { sub } = providerUser({ email: person.email });
      fake.misbehave(misbehaviour);
      const flow = await signIn(ts, { loginHint: sub });
      expect(flow.callback?.status).toBe(401);
      const body = await errorOf(flow.callback);
      expect(body).toMatchObject({
        error: 'The identity provider’s answer could not be verified',
        code: 'OIDC_TOKEN_INVALID',
      });
      expect(body.details?.reason).toMatch(reason);
      expect(flow.jar.has(SESSION_COOKIE)).toBe(false);
      expect(flow.jar.has(OIDC_STATE_COOKIE)).toBe(false);
      expect(await count('select 1 from user_identities where subject = ?', [sub])).toBe(0);
      expect(
        await count("select 1 from user_sessions where user_id = ? and method = 'oidc'", [person.userId]),
      ).toBe(0);
    });
  }

  it('a wrong state: 400 OIDC_STATE_INVALID, and the code is never exchanged', async () => {
    const { sub } = providerUser();
    fake.misbehave({ wrongState: true });
    const before = fake.tokenRequests.length;
    const flow = await signIn(ts, { loginHint: sub });
    expect(flow.callback?.status).toBe(400);
    expect(await errorOf(flow.callback)).toEqual({
      error: 'Invalid or expired sign-in attempt: start again',
      code: 'OIDC_STATE_INVALID',
    });
    expect(fake.tokenRequests.length).toBe(before);
    expect(flow.jar.has(SESSION_COOKIE)).toBe(false);
  });

  it('a callback in another browser (no pending sign-in cookie, or a forged one): 400 OIDC_STATE_INVALID', async () => {
    const person = await createTestSession(ts, ws, { role: 'member' });
    const { sub } = providerUser({ email: person.email });
    const jar: Jar = new Map();
    const start = await get(`${ts.url}/api/v1/auth/oidc/start?loginHint=${sub}`, jar);
    const authorize = await get(start.headers.get('location') as string, jar);
    const callbackUrl = authorize.headers.get('location') as string;
    // Login CSRF: the victim's browser has no pending sign-in of its own.
    const elsewhere = await get(callbackUrl, new Map());
    expect(elsewhere.status).toBe(400);
    expect(await errorOf(elsewhere)).toMatchObject({ code: 'OIDC_STATE_INVALID' });
    const sealed = jar.get(OIDC_STATE_COOKIE) as string;
    const forged = await get(callbackUrl, new Map([[OIDC_STATE_COOKIE, `${sealed.slice(0, -2)}AA`]]));
    expect(forged.status).toBe(400);
    // The real browser still signs in with it.
    const real = await get(callbackUrl, jar);
    expect(real.status).toBe(302);
  });

  it('a replayed callback (the code used twice): 401 OIDC_PROVIDER_REFUSED', async () => {
    const person = await createTestSession(ts, ws, { role: 'member' });
    const { sub } = providerUser({ email: person.email });
    const flow = await signIn(ts, { loginHint: sub });
    expect(flow.callback?.status).toBe(302);
    const pending = flow.start.headers
      .getSetCookie()
      .find((c) => c.startsWith(`${OIDC_STATE_COOKIE}=`))
      ?.split(';')[0]
      ?.slice(OIDC_STATE_COOKIE.length + 1) as string;
    const replay = await get(flow.callbackUrl as string, new Map([[OIDC_STATE_COOKIE, pending]]));
    expect(replay.status).toBe(401);
    expect(await errorOf(replay)).toMatchObject({
      code: 'OIDC_PROVIDER_REFUSED',
      details: { error: 'invalid_grant' },
    });
  });

  it('a token endpoint that is down: 502 OIDC_PROVIDER_UNAVAILABLE, no session', async () => {
    const person = await createTestSession(ts, ws, { role: 'member' });
    const { sub } = providerUser({ email: person.email });
    fake.misbehave({ tokenEndpointDown: true });
    const flow = await signIn(ts, { loginHint: sub });
    expect(flow.callback?.status).toBe(502);
    const body = await errorOf(flow.callback);
    expect(body).toMatchObject({ code: 'OIDC_PROVIDER_UNAVAILABLE' });
    expect(body.details?.reason).toMatch(/HTTP 503/);
    expect(flow.jar.has(SESSION_COOKIE)).toBe(false);
  });

  it('the provider refusing (access_denied): 401 OIDC_PROVIDER_REFUSED with its error', async () => {
    const { sub } = providerUser();
    fake.misbehave({ denyAuthorization: true });
    const flow = await signIn(ts, { loginHint: sub });
    expect(flow.callback?.status).toBe(401);
    expect(await errorOf(flow.callback)).toMatchObject({
      error: 'The identity provider refused the sign-in',
      code: 'OIDC_PROVIDER_REFUSED',
      details: { error: 'access_denied' },
    });
  });
});

describe('returnTo', () => {
  const hostile = [
    'https://evil.example/',
    '//evil.example/path',
    '/\\evil.example',
    '\\\\evil.example',
    '/\t/evil.example',
    '/\n/evil.example',
    'javascript:alert(1)',
    'http:evil.example',
    '/a/../..//evil.example',
    '/.//evil.example',
    ' /ok',
    'evil.example',
  ];
  it('refuses anything but a path on this site, before going to the provider', async () => {
    const before = fake.authorizeRequests.length;
    for (const returnTo of hostile) {
      const flow = await signIn(ts, { returnTo });
      expect(flow.start.status, returnTo).toBe(400);
      expect(await errorOf(flow.start), returnTo).toMatchObject({ code: 'INVALID_RETURN_TO' });
      expect(flow.start.headers.get('location')).toBeNull();
    }
    expect(fake.authorizeRequests.length).toBe(before);
    const twice = await get(`${ts.url}/api/v1/auth/oidc/start?returnTo=/a&returnTo=/b`, new Map());
    expect(twice.status).toBe(400);
  });

  it('normalises what it accepts into the Location header', () => {
    expect(safeReturnTo(undefined)).toBe('/');
    expect(safeReturnTo('')).toBe('/');
    expect(safeReturnTo('/console')).toBe('/console');
    expect(safeReturnTo('/a/./b/../c?x=1 2#f')).toBe('/a/c?x=1%202#f');
    expect(safeReturnTo('/%2F%2Fevil.example')).toBe('/%2F%2Fevil.example'); // a path, not a host
    for (const h of hostile) expect(() => safeReturnTo(h), h).toThrow();
  });
});

describe('who may sign in, and as whom', () => {
  it('never links an unverified email to an existing account: 403 OIDC_EMAIL_UNVERIFIED', async () => {
    const person = await createTestSession(ts, ws, { role: 'member' });
    const { sub } = providerUser({ email: person.email, verified: false });
    const flow = await signIn(ts, { loginHint: sub });
    expect(flow.callback?.status).toBe(403);
    expect(await errorOf(flow.callback)).toEqual({
      error: 'The identity provider has not verified this email address',
      code: 'OIDC_EMAIL_UNVERIFIED',
    });
    expect(await count('select 1 from user_identities where user_id = ?', [person.userId])).toBe(0);
    // Nor creates one, sign-up enabled or not.
    const stranger = providerUser({ email: `new-${uniq()}@${DOMAIN}`, verified: false });
    const onOpen = await signIn(open, { loginHint: stranger.sub });
    expect(onOpen.callback?.status).toBe(403);
    expect(await count('select 1 from users where lower(email) = ?', [stranger.email])).toBe(0);
  });

  it('the misbehaving provider claiming email_verified=false for a verified user is refused too', async () => {
    const person = await createTestSession(ts, ws, { role: 'member' });
    const { sub } = providerUser({ email: person.email });
    fake.misbehave({ emailVerified: false });
    expect((await signIn(ts, { loginHint: sub })).callback?.status).toBe(403);
  });

  it('an ID token without an email: 401 OIDC_EMAIL_MISSING', async () => {
    const sub = `sub-${uniq()}`;
    fake.addUser({ sub });
    const flow = await signIn(ts, { loginHint: sub });
    expect(flow.callback?.status).toBe(401);
    expect(await errorOf(flow.callback)).toMatchObject({ code: 'OIDC_EMAIL_MISSING' });
  });

  describe('a thin ID token (sub only): the UserInfo endpoint completes it', () => {
    it('links the account by the email UserInfo verifies', async () => {
      const person = await createTestSession(ts, ws, { role: 'member' });
      const { sub } = providerUser({ email: person.email, name: 'From UserInfo' });
      fake.misbehave({ thinIdToken: true });
      const before = fake.userInfoRequests;
      const flow = await signIn(ts, { loginHint: sub });
      expect(flow.callback?.status).toBe(302);
      expect(flow.jar.has(SESSION_COOKIE)).toBe(true);
      expect(fake.userInfoRequests).toBe(before + 1);
      expect(
        await count('select 1 from user_identities where subject = ? and user_id = ?', [sub, person.userId]),
      ).toBe(1);
    });

    it('an ID token that carries the verified email does not call UserInfo', async () => {
      const person = await createTestSession(ts, ws, { role: 'member' });
      const { sub } = providerUser({ email: person.email });
      const before = fake.userInfoRequests;
      expect((await signIn(ts, { loginHint: sub })).callback?.status).toBe(302);
      expect(fake.userInfoRequests).toBe(before);
    });

    it('UserInfo saying the email is not verified: 403 OIDC_EMAIL_UNVERIFIED', async () => {
      const person = await createTestSession(ts, ws, { role: 'member' });
      const { sub } = providerUser({ email: person.email, verified: false });
      fake.misbehave({ thinIdToken: true });
      const flow = await signIn(ts, { loginHint: sub });
      expect(flow.callback?.status).toBe(403);
      expect(await errorOf(flow.callback)).toMatchObject({ code: 'OIDC_EMAIL_UNVERIFIED' });
      expect(await count('select 1 from user_identities where subject = ?', [sub])).toBe(0);
    });

    it('UserInfo answering for another subject: 401 OIDC_TOKEN_INVALID, no session', async () => {
      const person = await createTestSession(ts, ws, { role: 'member' });
      const { sub } = providerUser({ email: person.email });
      fake.misbehave({ thinIdToken: true, userInfoWrongSubject: true });
      const flow = await signIn(ts, { loginHint: sub });
      expect(flow.callback?.status).toBe(401);
      expect(await errorOf(flow.callback)).toMatchObject({ code: 'OIDC_TOKEN_INVALID' });
      expect(flow.jar.has(SESSION_COOKIE)).toBe(false);
      expect(await count('select 1 from user_identities where subject = ?', [sub])).toBe(0);
    });

    it('UserInfo down: 502 OIDC_PROVIDER_UNAVAILABLE, no session', async () => {
      const person = await createTestSession(ts, ws, { role: 'member' });
      const { sub } = providerUser({ email: person.email });
      fake.misbehave({ thinIdToken: true, userInfoDown: true });
      const flow = await signIn(ts, { loginHint: sub });
      expect(flow.callback?.status).toBe(502);
      expect(await errorOf(flow.callback)).toMatchObject({ code: 'OIDC_PROVIDER_UNAVAILABLE' });
      expect(flow.jar.has(SESSION_COOKIE)).toBe(false);
    });

    it('neither the ID token nor UserInfo has an email: 401 OIDC_EMAIL_MISSING', async () => {
      const sub = `sub-${uniq()}`;
      fake.addUser({ sub, name: 'No Email' });
      fake.misbehave({ thinIdToken: true });
      const flow = await signIn(ts, { loginHint: sub });
      expect(flow.callback?.status).toBe(401);
      expect(await errorOf(flow.callback)).toMatchObject({ code: 'OIDC_EMAIL_MISSING' });
    });
  });

  it('sign-up disabled: a new email without an invitation is refused, and no account is created', async () => {
    const { sub, email } = providerUser();
    const flow = await signIn(ts, { loginHint: sub });
    expect(flow.callback?.status).toBe(403);
    expect(await errorOf(flow.callback)).toEqual({
      error: 'No account uses this email and sign-up is disabled: ask for an invitation',
      code: 'SIGNUP_DISABLED',
    });
    expect(await count('select 1 from users where lower(email) = ?', [email])).toBe(0);
  });

  it('a browser (Accept: text/html) is sent to the console page that explains the failure, never JSON', async () => {
    const { sub, email } = providerUser();
    const flow = await signIn(ts, { loginHint: sub, accept: BROWSER_ACCEPT });
    expect(flow.callback?.status).toBe(303);
    expect(flow.callback?.headers.get('location')).toBe('/sign-in/problem?code=SIGNUP_DISABLED');
    expect(flow.callback?.headers.get('cache-control')).toBe('no-store');
    expect(flow.jar.has(SESSION_COOKIE)).toBe(false);
    expect(await count('select 1 from users where lower(email) = ?', [email])).toBe(0);
    // The same for the provider refusing, a lost pending sign-in and a bad returnTo at the start.
    fake.misbehave({ denyAuthorization: true });
    const refused = await signIn(ts, { loginHint: sub, accept: BROWSER_ACCEPT });
    fake.misbehave({});
    expect(refused.callback?.headers.get('location')).toBe('/sign-in/problem?code=OIDC_PROVIDER_REFUSED');
    const replay = await get(refused.callbackUrl as string, new Map(), BROWSER_ACCEPT);
    expect([replay.status, replay.headers.get('location')]).toEqual([
      303,
      '/sign-in/problem?code=OIDC_STATE_INVALID',
    ]);
    const start = await get(
      `${ts.url}/api/v1/auth/oidc/start?returnTo=//evil.example`,
      new Map(),
      BROWSER_ACCEPT,
    );
    expect([start.status, start.headers.get('location')]).toEqual([
      303,
      '/sign-in/problem?code=INVALID_RETURN_TO',
    ]);
    // A server without OIDC settings: the browser is told so on the same page.
    const off = await get(`${plain.url}/api/v1/auth/oidc/start`, new Map(), BROWSER_ACCEPT);
    expect(off.headers.get('location')).toBe('/sign-in/problem?code=OIDC_NOT_CONFIGURED');
    // API callers keep the JSON body (no Accept, or JSON).
    const api = await signIn(ts, { loginHint: sub, accept: 'application/json' });
    expect(api.callback?.status).toBe(403);
    expect(await errorOf(api.callback)).toMatchObject({ code: 'SIGNUP_DISABLED' });
  });

  it('sign-up disabled: a new email with a pending invitation gets an account in the invited workspace', async () => {
    const owner = await createTestSession(ts, ws, { role: 'owner' });
    const { sub, email } = providerUser({ name: 'Invited Person' });
    const invited = await ts.api(`/workspaces/${ws.workspaceId}/invitations`, {
      method: 'POST',
      key: owner.token,
      json: { email, role: 'admin' },
    });
    expect(invited.status).toBe(201);
    const invitationId = ((await invited.json()) as { invitation: { id: string } }).invitation.id;
    const flow = await signIn(ts, { loginHint: sub, returnTo: '/welcome' });
    expect(flow.callback?.status).toBe(302);
    expect(flow.callback?.headers.get('location')).toBe('/welcome');
    const session = await sessionOf(ts, flow.jar);
    expect(session).toMatchObject({
      session: { method: 'oidc' },
      user: { email, name: 'Invited Person' },
      workspace: { id: ws.workspaceId, role: 'admin' },
    });
    // The invitation is used up, and the account has no password.
    const list = await ts.api(`/workspaces/${ws.workspaceId}/invitations`, { key: owner.token });
    const invitations = ((await list.json()) as { invitations: { id: string; status: string }[] })
      .invitations;
    expect(invitations.find((i) => i.id === invitationId)?.status).toBe('accepted');
    expect(await count('select 1 from users where lower(email) = ? and password_hash is null', [email])).toBe(
      1,
    );
  });

  it('sign-up enabled: a new verified email in an allowed domain gets an account owning a new workspace', async () => {
    const { sub, email } = providerUser({ email: `founder-${uniq()}@${DOMAIN}` });
    const flow = await signIn(open, { loginHint: sub });
    expect(flow.callback?.status).toBe(302);
    const session = await sessionOf(open, flow.jar);
    expect(session?.user.email).toBe(email);
    expect(session?.workspace?.role).toBe('owner');
    expect(session?.workspaces).toHaveLength(1);
  });

  it('an email outside OIDC_ALLOWED_DOMAINS is refused: 403 OIDC_DOMAIN_NOT_ALLOWED', async () => {
    const person = await createTestSession(open, ws, { role: 'member' }); // example.com
    const { sub } = providerUser({ email: person.email });
    const flow = await signIn(open, { loginHint: sub });
    expect(flow.callback?.status).toBe(403);
    expect(await errorOf(flow.callback)).toEqual({
      error: 'This email domain is not allowed to sign in here',
      code: 'OIDC_DOMAIN_NOT_ALLOWED',
      details: { domain: 'example.com' },
    });
    // A look-alike domain is not a subdomain match either.
    const lookalike = providerUser({ email: `x-${uniq()}@evil${DOMAIN}` });
    expect((await signIn(open, { loginHint: lookalike.sub })).callback?.status).toBe(403);
    const sub2 = providerUser({ email: `x-${uniq()}@sub.${DOMAIN}` });
    expect((await signIn(open, { loginHint: sub2.sub })).callback?.status).toBe(403);
  });

  it('an account linked to one identity is not handed to another identity with the same email: 409', async () => {
    const person = await createTestSession(ts, ws, { role: 'member' });
    const first = providerUser({ email: person.email });
    expect((await signIn(ts, { loginHint: first.sub })).callback?.status).toBe(302);
    // The provider gives the address to someone else (a new subject).
    const second = providerUser({ email: person.email });
    const flow = await signIn(ts, { loginHint: second.sub });
    expect(flow.callback?.status).toBe(409);
    expect(await errorOf(flow.callback)).toMatchObject({ code: 'OIDC_IDENTITY_CONFLICT' });
    expect(flow.jar.has(SESSION_COOKIE)).toBe(false);
  });
});
