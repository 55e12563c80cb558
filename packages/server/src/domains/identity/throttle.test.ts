import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestSession,
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

/** Three failures per account, five per address, within 15 minutes; addresses from X-Forwarded-For. */
let ts: TestServer;
let ws: TestWorkspace;
beforeAll(async () => {
  ts = await startTestServer({
    env: {
      AUTH_SIGNIN_MAX_FAILURES_PER_ACCOUNT: '3',
      AUTH_SIGNIN_MAX_FAILURES_PER_ADDRESS: '5',
      AUTH_SIGNIN_WINDOW_SECONDS: '900',
      TRUST_PROXY: 'true',
    },
  });
  ws = await createTestWorkspace(ts);
});
afterAll(() => ts?.close());

let nextAddress = 1;
const newAddress = () => `203.0.113.${nextAddress++}`;
const signIn = (email: string, password: string, address: string) =>
  ts.api('/auth/sign-in', {
    method: 'POST',
    json: { email, password },
    headers: { 'x-forwarded-for': address },
  });

async function expectThrottled(res: Response) {
  expect(res.status).toBe(429);
  const retryAfter = Number(res.headers.get('retry-after'));
  expect(retryAfter).toBeGreaterThan(0);
  expect(retryAfter).toBeLessThanOrEqual(900);
  expect(await res.json()).toEqual({
    error: 'Too many failed sign-in attempts: try again later',
    code: 'SIGN_IN_THROTTLED',
    details: { retryAfterSeconds: retryAfter },
  });
}

describe('throttling of failed sign-ins', () => {
  it('per account: after 3 failures even the right password waits, from any address', async () => {
    const s = await createTestSession(ts, ws);
    for (let i = 0; i < 3; i++) expect((await signIn(s.email, 'wrong', newAddress())).status).toBe(401);
    await expectThrottled(await signIn(s.email, s.password, newAddress()));
    await expectThrottled(await signIn(s.email.toUpperCase(), s.password, newAddress()));
    // Other accounts are not affected.
    const t = await createTestSession(ts, ws);
    expect((await signIn(t.email, t.password, newAddress())).status).toBe(200);
    // When the window ends, the account opens again.
    await ts.server.deps.em().execute("update sign_in_failures set expire = 0 where key like 'account:%'");
    expect((await signIn(s.email, s.password, newAddress())).status).toBe(200);
  });

  it('an unknown email is counted and answered exactly like a wrong password', async () => {
    const known = await createTestSession(ts, ws);
    const unknown = `nobody-${Date.now()}@example.com`;
    const answers: [number, boolean, unknown][][] = [[], []];
    for (const [i, email] of [known.email, unknown].entries()) {
      for (let n = 0; n < 4; n++) {
        const res = await signIn(email, 'wrong password', newAddress());
        const body = (await res.json()) as { details?: { retryAfterSeconds?: number } };
        // The seconds left depend on when the window opened (a second apart on a slow
        // machine); the shape of the answer is what must not differ.
        if (body.details?.retryAfterSeconds !== undefined) body.details.retryAfterSeconds = 0;
        answers[i]?.push([res.status, res.headers.get('retry-after') !== null, body]);
      }
    }
    expect(answers[0]).toEqual(answers[1]);
    expect(answers[0]?.map((a) => a[0])).toEqual([401, 401, 401, 429]);
  });

  it('a success clears the account’s failures', async () => {
    const s = await createTestSession(ts, ws);
    const address = newAddress();
    for (let i = 0; i < 2; i++) expect((await signIn(s.email, 'wrong', address)).status).toBe(401);
    expect((await signIn(s.email, s.password, address)).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await signIn(s.email, 'wrong', address)).status).toBe(401);
    expect((await signIn(s.email, s.password, address)).status).toBe(200);
  });

  it('per address: 5 failures over many accounts close that address, not others', async () => {
    const address = newAddress();
    for (let i = 0; i < 5; i++) {
      expect((await signIn(`spray-${i}-${Date.now()}@example.com`, 'guess', address)).status).toBe(401);
    }
    const s = await createTestSession(ts, ws);
    await expectThrottled(await signIn(s.email, s.password, address));
    expect((await signIn(s.email, s.password, newAddress())).status).toBe(200);
  });

  it('counts concurrent failures exactly (atomic upsert)', async () => {
    const s = await createTestSession(ts, ws);
    const results = await Promise.all(
      Array.from({ length: 6 }, () => signIn(s.email, 'wrong', newAddress())),
    );
    const statuses = results.map((r) => r.status);
    // The check runs before the count, so requests racing past it together may all answer
    // 401 (at least the 3 allowed do); the counter holds every failure that was checked.
    const failures = statuses.filter((x) => x === 401).length;
    expect(failures).toBeGreaterThanOrEqual(3);
    expect(failures + statuses.filter((x) => x === 429).length).toBe(6);
    const key = `account:${createHash('sha256').update(s.email.toLowerCase()).digest('hex')}`;
    const rows = await ts.server.deps
      .em()
      .execute<{ points: number }[]>('select points from sign_in_failures where key = ?', [key]);
    expect(Number(rows[0]?.points)).toBe(failures);
    await expectThrottled(await signIn(s.email, s.password, newAddress()));
  });

  it('throttles password guesses through invitation links too', async () => {
    const owner = await createTestSession(ts, ws, { role: 'owner' });
    const other = await createTestWorkspace(ts);
    const target = await createTestSession(ts, other);
    const inv = (await (
      await ts.api(`/workspaces/${ws.workspaceId}/invitations`, {
        method: 'POST',
        key: owner.token,
        json: { email: target.email },
      })
    ).json()) as { token: string };
    const accept = (password: string) =>
      ts.api('/auth/invitations/accept', {
        method: 'POST',
        json: { token: inv.token, password },
        headers: { 'x-forwarded-for': newAddress() },
      });
    for (let i = 0; i < 3; i++) expect((await accept('wrong')).status).toBe(401);
    await expectThrottled(await accept(target.password));
  });
});
