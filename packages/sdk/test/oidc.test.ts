import {
  createTestSession,
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '@ai-suite/server/test-harness';
import { type FakeOidc, fakeOidcEnv, startFakeOidc } from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AiSuite, AuthenticationError, BadRequestError } from '../src/index.js';

let fake: FakeOidc;
let ts: TestServer;
let ws: TestWorkspace;
beforeAll(async () => {
  fake = await startFakeOidc({ clientSecret: 'sdk-oidc-secret' });
  ts = await startTestServer({ env: { ...fakeOidcEnv(fake), OIDC_PROVIDER_NAME: 'Acme SSO' } });
  ws = await createTestWorkspace(ts);
});
afterAll(async () => {
  await ts?.close();
  await fake?.close();
});

/** The `name=value` of a response's Set-Cookie for `name`. */
const cookieOf = (res: Response, name: string) =>
  res.headers
    .getSetCookie()
    .find((c) => c.startsWith(`${name}=`))
    ?.split(';')[0];

describe('sign-in providers and OIDC through the SDK', () => {
  it('lists the providers and builds the start URL a browser follows to a session', async () => {
    const anon = new AiSuite({ baseURL: ts.url, maxRetries: 0 });
    expect(await anon.auth.providers()).toEqual({
      password: true,
      signUp: false,
      oidc: { name: 'Acme SSO', startUrl: '/api/v1/auth/oidc/start' },
    });
    const person = await createTestSession(ts, ws, { role: 'member' });
    fake.addUser({ sub: 'sdk-person', email: person.email, email_verified: true });
    const url = anon.auth.oidcSignInUrl({ returnTo: '/after', loginHint: 'sdk-person' });
    expect(url).toBe(`${ts.url}/api/v1/auth/oidc/start?returnTo=%2Fafter&loginHint=sdk-person`);

    // The browser: start, the provider, the callback.
    const start = await fetch(url, { redirect: 'manual' });
    expect(start.status).toBe(302);
    const pending = cookieOf(start, 'aisuite_oidc') as string;
    const authorize = await fetch(start.headers.get('location') as string, { redirect: 'manual' });
    const callback = await fetch(authorize.headers.get('location') as string, {
      redirect: 'manual',
      headers: { cookie: pending },
    });
    expect(callback.status).toBe(302);
    expect(callback.headers.get('location')).toBe('/after');
    const token = cookieOf(callback, 'aisuite_session')?.split('=')[1] as string;
    const asPerson = new AiSuite({ baseURL: ts.url, sessionToken: token, maxRetries: 0 });
    const session = await asPerson.auth.session();
    expect(session.session.method).toBe('oidc');
    expect(session.user.id).toBe(person.userId);
  });

  it('changes the password; the other sessions end, this one stays', async () => {
    const person = await createTestSession(ts, ws, { role: 'member' });
    const client = new AiSuite({ baseURL: ts.url, maxRetries: 0 });
    await client.auth.signIn({ email: person.email, password: person.password });
    await expect(
      client.auth.changePassword({ currentPassword: 'not it at all', newPassword: 'the new password' }),
    ).rejects.toBeInstanceOf(BadRequestError);
    const changed = await client.auth.changePassword({
      currentPassword: person.password,
      newPassword: 'the new password',
    });
    expect(changed).toEqual({ passwordChanged: true, sessionsRevoked: 1 });
    expect((await client.auth.session()).user.id).toBe(person.userId);
    const old = new AiSuite({ baseURL: ts.url, sessionToken: person.token, maxRetries: 0 });
    await expect(old.auth.session()).rejects.toBeInstanceOf(AuthenticationError);
  });
});
