import { type FakeSmtp, startFakeSmtp } from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestSession,
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestSession,
  type TestWorkspace,
} from '../../test/harness.js';

let ts: TestServer;
let smtp: FakeSmtp;
let ws: TestWorkspace;
let other: TestWorkspace;
let owner: TestSession;
let admin: TestSession;
let member: TestSession;
beforeAll(async () => {
  smtp = await startFakeSmtp();
  ts = await startTestServer({
    env: {
      SMTP_URL: smtp.url,
      MAIL_FROM: 'AI Suite <noreply@example.com>',
      AUTH_INVITATION_URL: 'https://console.example.com/accept',
    },
  });
  ws = await createTestWorkspace(ts, { name: 'Members A' });
  other = await createTestWorkspace(ts, { name: 'Members B' });
  owner = await createTestSession(ts, ws, { role: 'owner' });
  admin = await createTestSession(ts, ws, { role: 'admin' });
  member = await createTestSession(ts, ws, { role: 'member' });
});
afterAll(async () => {
  await ts?.close();
  await smtp?.close();
});

const members = (workspaceId = ws.workspaceId, suffix = '') => `/workspaces/${workspaceId}/members${suffix}`;
const invitations = (workspaceId = ws.workspaceId, suffix = '') =>
  `/workspaces/${workspaceId}/invitations${suffix}`;
const setRole = (key: string, userId: string, role: string, workspaceId = ws.workspaceId) =>
  ts.api(members(workspaceId, `/${userId}`), { method: 'PATCH', key, json: { role } });
const remove = (key: string, userId: string, workspaceId = ws.workspaceId) =>
  ts.api(members(workspaceId, `/${userId}`), { method: 'DELETE', key });
const invite = (key: string, json: unknown, workspaceId = ws.workspaceId) =>
  ts.api(invitations(workspaceId), { method: 'POST', key, json });
const accept = (json: unknown, headers: Record<string, string> = {}) =>
  ts.api('/auth/invitations/accept', { method: 'POST', json, headers });

interface Created {
  invitation: { id: string; email: string; role: string; status: string; expiresAt: string };
  token: string;
  url: string;
  mailed: boolean;
}
const email = () => `new-${Math.random().toString(36).slice(2, 10)}@example.com`;
const sql = <T>(q: string, p: unknown[] = []) => ts.server.deps.em().execute<T[]>(q, p);

describe('members and roles', () => {
  it('lists members with their roles, for any member of the workspace', async () => {
    const res = await ts.api(members(), { key: member.token });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { members: { userId: string; email: string; role: string }[] };
    expect(body.members).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ userId: owner.userId, email: owner.email, role: 'owner' }),
        expect.objectContaining({ userId: member.userId, role: 'member' }),
      ]),
    );
  });

  it('lets owners and admins change roles; a member cannot, not even their own', async () => {
    const m = await createTestSession(ts, ws, { role: 'member' });
    const res = await setRole(admin.token, m.userId, 'admin');
    expect(res.status).toBe(200);
    expect(((await res.json()) as { member: { role: string } }).member.role).toBe('admin');
    // Effective on the next request of that person's session.
    expect(
      ((await (await ts.api('/auth/session', { key: m.token })).json()) as { workspace: { role: string } })
        .workspace.role,
    ).toBe('admin');
    await setRole(owner.token, m.userId, 'member');

    for (const target of [member.userId, m.userId]) {
      for (const role of ['admin', 'owner']) {
        const r = await setRole(member.token, target, role);
        expect(r.status).toBe(403);
        expect(await r.json()).toEqual({ error: 'Insufficient permissions to manage members' });
      }
    }
    const [row] = await sql<{ role: string }>(
      'select role from memberships where user_id = ? and workspace_id = ?',
      [member.userId, ws.workspaceId],
    );
    expect(row?.role).toBe('member');
  });

  it('keeps the owner role to owners: an admin cannot grant it, take it, or make themself owner', async () => {
    for (const [target, role] of [
      [admin.userId, 'owner'],
      [member.userId, 'owner'],
      [owner.userId, 'admin'],
    ] as const) {
      const r = await setRole(admin.token, target, role);
      expect(r.status, `${target} → ${role}`).toBe(403);
      expect(await r.json()).toEqual({ error: 'Only an owner can grant, change or remove the owner role' });
    }
    expect((await remove(admin.token, owner.userId)).status).toBe(403);
  });

  it('never leaves a workspace without an owner, concurrent demotions included', async () => {
    const w = await createTestWorkspace(ts);
    const o1 = await createTestSession(ts, w, { role: 'owner' });
    const self = await setRole(o1.token, o1.userId, 'admin', w.workspaceId);
    expect(self.status).toBe(409);
    expect(await self.json()).toEqual({
      error: 'A workspace must keep at least one owner: make someone else owner first',
      code: 'LAST_OWNER',
    });
    const leave = await remove(o1.token, o1.userId, w.workspaceId);
    expect(leave.status).toBe(409);

    const o2 = await createTestSession(ts, w, { role: 'owner' });
    const both = await Promise.all([
      setRole(o1.token, o2.userId, 'member', w.workspaceId),
      setRole(o2.token, o1.userId, 'member', w.workspaceId),
    ]);
    // Whichever change takes the workspace lock first wins; the other owner is a member by then,
    // whether their request authenticated before that commit or after it.
    expect(both.map((r) => r.status).sort()).toEqual([200, 403]);
    const lost = both.find((r) => r.status === 403);
    expect(await lost?.json()).toEqual({ error: 'Insufficient permissions to manage members' });
    const owners = await sql('select 1 from memberships where workspace_id = ? and role = ?', [
      w.workspaceId,
      'owner',
    ]);
    expect(owners).toHaveLength(1);
  });

  // Needs a second connection to hold the lock while the request waits: the server database only
  // (the embedded database has one connection, so the request could not authenticate meanwhile).
  it.skipIf(!process.env.DATABASE_URL)(
    'decides with the role the caller has when the change is made, not when the request began',
    async () => {
      const w = await createTestWorkspace(ts);
      const o1 = await createTestSession(ts, w, { role: 'owner' });
      const o2 = await createTestSession(ts, w, { role: 'owner' });
      const i1 = await invite(o2.token, { email: email(), role: 'owner' }, w.workspaceId);
      expect(i1.status).toBe(201);
      let demote: Promise<Response> | undefined;
      let inviteOwner: Promise<Response> | undefined;
      await ts.server.deps
        .em()
        .fork()
        .transactional(async (tx) => {
          await tx.execute('select id from workspaces where id = ? for update', [w.workspaceId]);
          // o2 authenticates as an owner, then waits for the workspace lock this test holds.
          demote = setRole(o2.token, o1.userId, 'member', w.workspaceId);
          inviteOwner = invite(o2.token, { email: email(), role: 'owner' }, w.workspaceId);
          // Both requests must be waiting for the lock, or the test would not test the race.
          let waiting = 0;
          for (let i = 0; i < 500 && waiting < 2; i++) {
            const rows = await sql<{ n: string }>(
              "select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
            );
            waiting = Number(rows[0]?.n);
            if (waiting < 2) await new Promise((r) => setTimeout(r, 10));
          }
          expect(waiting).toBe(2);
          await tx.execute("update memberships set role = 'admin' where workspace_id = ? and user_id = ?", [
            w.workspaceId,
            o2.userId,
          ]);
        });
      const [d, inv] = await Promise.all([demote, inviteOwner]);
      expect(d?.status).toBe(403);
      expect(await d?.json()).toEqual({ error: 'Only an owner can grant, change or remove the owner role' });
      expect(inv?.status).toBe(403);
      const roles = await sql<{ user_id: string; role: string }>(
        'select user_id, role from memberships where workspace_id = ?',
        [w.workspaceId],
      );
      expect(roles.find((r) => r.user_id === o1.userId)?.role).toBe('owner');
    },
  );

  it('finds a member whatever the case of the id in the path', async () => {
    const m = await createTestSession(ts, ws, { role: 'member' });
    const res = await setRole(owner.token, m.userId.toUpperCase(), 'admin');
    expect(res.status).toBe(200);
    expect(((await res.json()) as { member: { userId: string; role: string } }).member).toMatchObject({
      userId: m.userId,
      role: 'admin',
    });
    // Removing answers with the id as stored too, not as the path spelled it.
    const removed = await remove(owner.token, m.userId.toUpperCase());
    expect(removed.status).toBe(200);
    expect(await removed.json()).toEqual({ removed: true, userId: m.userId });
  });

  it('removes members (their sessions lose the workspace) and lets anyone leave', async () => {
    const m = await createTestSession(ts, ws, { role: 'member' });
    const res = await remove(admin.token, m.userId);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ removed: true, userId: m.userId });
    const after = await ts.api(members(), { key: m.token });
    expect(after.status).toBe(403);
    expect(((await after.json()) as { code: string }).code).toBe('NO_ACTIVE_WORKSPACE');

    const leaver = await createTestSession(ts, ws, { role: 'member' });
    expect((await remove(leaver.token, leaver.userId)).status).toBe(200);
    // A member cannot remove someone else.
    const r = await remove(member.token, admin.userId);
    expect(r.status).toBe(403);
    // Unknown or malformed ids.
    for (const id of ['00000000-0000-4000-8000-000000000000', 'nope', other.workspaceId]) {
      const nf = await remove(owner.token, id);
      expect(nf.status).toBe(404);
      expect(await nf.json()).toEqual({ error: 'Member not found' });
    }
  });

  it('never acts in another workspace by changing the path id', async () => {
    const o = await createTestSession(ts, other, { role: 'member' });
    for (const res of [
      await ts.api(members(other.workspaceId), { key: owner.token }),
      await setRole(owner.token, o.userId, 'owner', other.workspaceId),
      await remove(owner.token, o.userId, other.workspaceId),
      await invite(owner.token, { email: email() }, other.workspaceId),
      await ts.api(invitations(other.workspaceId), { key: owner.token }),
    ]) {
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual({
        error: 'Access denied to workspace',
        code: 'WORKSPACE_ACCESS_DENIED',
      });
    }
    const [row] = await sql<{ role: string }>('select role from memberships where user_id = ?', [o.userId]);
    expect(row?.role).toBe('member');
  });

  it('refuses API keys and anonymous callers with 401', async () => {
    for (const key of [ws.apiKey, undefined]) {
      const res = await ts.api(members(), { key });
      expect(res.status).toBe(401);
      expect(await res.json()).toEqual({ error: 'Authentication required' });
      expect((await invite(key as string, { email: email() })).status).toBe(401);
    }
  });
});

describe('invitations', () => {
  it('returns a signed single-use link, mails it, and accepting creates the account and a session', async () => {
    const to = email();
    const res = await invite(admin.token, { email: to.toUpperCase(), role: 'admin' });
    expect(res.status).toBe(201);
    const body = (await res.json()) as Created;
    expect(body.token).toMatch(/^svc_iv_[0-9a-f]{32}\.[A-Za-z0-9_-]{43}$/);
    expect(body.url).toBe(`https://console.example.com/accept#token=${body.token}`);
    expect(body.invitation).toMatchObject({ email: to, role: 'admin', status: 'pending' });
    expect(body.mailed).toBe(true);
    const mail = smtp.received.find((m) => m.to.includes(to));
    expect(mail?.user).toBe('mailer');
    expect(mail?.raw).toContain('Members A');
    expect(mail?.raw.replace(/=\r?\n/g, '')).toContain(body.token);

    const preview = await ts.api('/auth/invitations/preview', {
      method: 'POST',
      json: { token: body.token },
    });
    expect(await preview.json()).toMatchObject({
      workspace: { id: ws.workspaceId, name: 'Members A' },
      email: to,
      role: 'admin',
      accountExists: false,
    });

    const noPassword = await accept({ token: body.token });
    expect(noPassword.status).toBe(400);
    expect(((await noPassword.json()) as { code: string }).code).toBe('PASSWORD_REQUIRED');
    const weak = await accept({ token: body.token, password: 'short' });
    expect(weak.status).toBe(400);

    const ok = await accept(
      { token: body.token, password: 'a long enough password', name: 'Grace' },
      { origin: ts.url },
    );
    expect(ok.status).toBe(200);
    const signedIn = (await ok.json()) as {
      token: string;
      session: { method: string };
      user: { email: string; name: string };
      workspace: { id: string; role: string };
    };
    expect(signedIn).toMatchObject({
      session: { method: 'invitation' },
      user: { email: to, name: 'Grace' },
      workspace: { id: ws.workspaceId, role: 'admin' },
    });
    expect(ok.headers.getSetCookie().join()).toContain('aisuite_session=');
    // The new account signs in with its password.
    const signIn = await ts.api('/auth/sign-in', {
      method: 'POST',
      json: { email: to, password: 'a long enough password' },
    });
    expect(signIn.status).toBe(200);

    // Single use.
    const again = await accept({ token: body.token, password: 'a long enough password' });
    expect(again.status).toBe(400);
    expect(await again.json()).toEqual({
      error: 'Invalid or expired invitation',
      code: 'INVITATION_INVALID',
    });
    const list = (await (await ts.api(invitations(), { key: owner.token })).json()) as {
      invitations: { id: string; status: string }[];
    };
    expect(list.invitations.find((i) => i.id === body.invitation.id)?.status).toBe('accepted');
  });

  it('is used at most once when accepted twice at the same moment', async () => {
    const body = (await (await invite(owner.token, { email: email() })).json()) as Created;
    const both = await Promise.all([
      accept({ token: body.token, password: 'password one!' }),
      accept({ token: body.token, password: 'password two!' }),
    ]);
    expect(both.map((r) => r.status).sort()).toEqual([200, 400]);
  });

  it('refuses forged, tampered and revoked links with the same answer', async () => {
    const body = (await (await invite(owner.token, { email: email() })).json()) as Created;
    const [head, mac] = body.token.split('.') as [string, string];
    const flipped = `${head}.${mac[0] === 'A' ? 'B' : 'A'}${mac.slice(1)}`;
    const forgedId = `svc_iv_${'0'.repeat(32)}.${mac}`;
    for (const token of [flipped, forgedId, 'svc_iv_nope', 'x']) {
      const r = await accept({ token, password: 'a long enough password' });
      expect(r.status, token).toBe(400);
      expect(await r.json()).toEqual({ error: 'Invalid or expired invitation', code: 'INVITATION_INVALID' });
    }
    // A changed role in the database voids the signature.
    await sql("update invitations set role = 'owner' where id = ?", [body.invitation.id]);
    expect((await accept({ token: body.token, password: 'a long enough password' })).status).toBe(400);
    await sql("update invitations set role = 'member' where id = ?", [body.invitation.id]);

    const revoked = await ts.api(invitations(ws.workspaceId, `/${body.invitation.id}`), {
      method: 'DELETE',
      key: admin.token,
    });
    expect(revoked.status).toBe(200);
    expect(((await revoked.json()) as Created).invitation.status).toBe('revoked');
    expect((await accept({ token: body.token, password: 'a long enough password' })).status).toBe(400);
  });

  it('links an existing account only for that person: their session or their password', async () => {
    const existing = await createTestSession(ts, other, { role: 'owner' });
    const body = (await (await invite(owner.token, { email: existing.email })).json()) as Created;
    const preview = await ts.api('/auth/invitations/preview', {
      method: 'POST',
      json: { token: body.token },
    });
    expect(((await preview.json()) as { accountExists: boolean }).accountExists).toBe(true);

    // Someone else's session, or nothing, is not enough; a wrong password neither.
    const stranger = await accept({ token: body.token }, { authorization: `Bearer ${member.token}` });
    expect(stranger.status).toBe(401);
    expect(((await stranger.json()) as { code: string }).code).toBe('SIGN_IN_REQUIRED');
    const wrong = await accept({ token: body.token, password: 'not their password' });
    expect(wrong.status).toBe(401);
    expect(await wrong.json()).toEqual({ error: 'Invalid email or password', code: 'INVALID_CREDENTIALS' });
    // A cookie session from another site is refused (CSRF).
    const cross = await accept(
      { token: body.token },
      { cookie: existing.cookie, origin: 'https://evil.example' },
    );
    expect(cross.status).toBe(403);

    const ok = await accept({ token: body.token }, { authorization: `Bearer ${existing.token}` });
    expect(ok.status).toBe(200);
    const signedIn = (await ok.json()) as { workspace: { id: string; role: string }; workspaces: unknown[] };
    expect(signedIn.workspace).toMatchObject({ id: ws.workspaceId, role: 'member' });
    expect(signedIn.workspaces).toHaveLength(2);
    // The session it came with is replaced.
    expect((await ts.api('/auth/session', { key: existing.token })).status).toBe(401);
    // Password hash unchanged: the old password still works.
    expect(
      (
        await ts.api('/auth/sign-in', {
          method: 'POST',
          json: { email: existing.email, password: existing.password },
        })
      ).status,
    ).toBe(200);
  });

  it('limits who invites whom', async () => {
    const m = await invite(member.token, { email: email() });
    expect(m.status).toBe(403);
    expect(await m.json()).toEqual({ error: 'Insufficient permissions to manage members' });
    const a = await invite(admin.token, { email: email(), role: 'owner' });
    expect(a.status).toBe(403);
    const o = await invite(owner.token, { email: email(), role: 'owner' });
    expect(o.status).toBe(201);
    const already = await invite(owner.token, { email: member.email });
    expect(already.status).toBe(409);
    expect(await already.json()).toEqual({
      error: 'Already a member of this workspace',
      code: 'ALREADY_MEMBER',
    });
    expect((await invite(owner.token, { email: 'not an email' })).status).toBe(400);
    expect((await invite(owner.token, { email: email(), role: 'god' })).status).toBe(400);
    expect((await ts.api(invitations(), { key: member.token })).status).toBe(403);
    const nf = await ts.api(invitations(ws.workspaceId, '/00000000-0000-4000-8000-000000000000'), {
      method: 'DELETE',
      key: owner.token,
    });
    expect(nf.status).toBe(404);
    expect(await nf.json()).toEqual({ error: 'Invitation not found' });
  });

  it('a new invitation to the same email replaces the pending one', async () => {
    const to = email();
    const first = (await (await invite(owner.token, { email: to })).json()) as Created;
    const second = (await (await invite(owner.token, { email: to })).json()) as Created;
    expect((await accept({ token: first.token, password: 'a long enough password' })).status).toBe(400);
    expect((await accept({ token: second.token, password: 'a long enough password' })).status).toBe(200);
  });

  it('still answers with the link when the mail server refuses the message', async () => {
    smtp.refuse(true);
    try {
      const res = await invite(owner.token, { email: email() });
      expect(res.status).toBe(201);
      const body = (await res.json()) as Created;
      expect(body.mailed).toBe(false);
      expect(body.url).toContain(body.token);
    } finally {
      smtp.refuse(false);
    }
  });
});

describe('expiry of invitations', () => {
  it('refuses an expired link', async () => {
    const short = await startTestServer({ env: { AUTH_INVITATION_TTL_SECONDS: '60' }, db: ts.db });
    try {
      const res = await short.api(invitations(), {
        method: 'POST',
        key: owner.token,
        json: { email: email() },
      });
      expect(res.status).toBe(201);
      const body = (await res.json()) as Created;
      expect(body.mailed).toBe(false); // no SMTP on this server
      expect(body.url).toMatch(new RegExp(`^${short.url}/invitations/accept#token=`));
      const ok = await short.api('/auth/invitations/preview', {
        method: 'POST',
        json: { token: body.token },
      });
      expect(ok.status).toBe(200);
      await short.server.deps
        .em()
        .execute("update invitations set expires_at = expires_at - interval '61 seconds' where id = ?", [
          body.invitation.id,
        ]);
      const r = await short.api('/auth/invitations/accept', {
        method: 'POST',
        json: { token: body.token, password: 'a long enough password' },
      });
      expect(r.status).toBe(400);
      expect(await r.json()).toEqual({ error: 'Invalid or expired invitation', code: 'INVITATION_INVALID' });
    } finally {
      await short.close();
    }
  });
});

describe('sign-up', () => {
  it('is off by default', async () => {
    const res = await ts.api('/auth/sign-up', {
      method: 'POST',
      json: { email: email(), password: 'a long enough password' },
    });
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({ error: 'Sign-up is disabled', code: 'SIGNUP_DISABLED' });
  });

  it('when AUTH_SIGNUP_ENABLED, creates an account owning a new workspace, signed in', async () => {
    const open = await startTestServer({ env: { AUTH_SIGNUP_ENABLED: 'true' }, db: ts.db });
    try {
      const to = email();
      const res = await open.api('/auth/sign-up', {
        method: 'POST',
        json: { email: to, password: 'a long enough password', workspaceName: `Signup ${to}` },
      });
      expect(res.status).toBe(201);
      const body = (await res.json()) as { token: string; workspace: { name: string; role: string } };
      expect(body.workspace).toMatchObject({ name: `Signup ${to}`, role: 'owner' });
      expect(
        (
          await open.api(`/workspaces/${(body.workspace as unknown as { id: string }).id}/members`, {
            key: body.token,
          })
        ).status,
      ).toBe(200);
      const dup = await open.api('/auth/sign-up', {
        method: 'POST',
        json: { email: to.toUpperCase(), password: 'a long enough password' },
      });
      expect(dup.status).toBe(409);
      const weak = await open.api('/auth/sign-up', {
        method: 'POST',
        json: { email: email(), password: 'short' },
      });
      expect(weak.status).toBe(400);
      const bad = await open.api('/auth/sign-up', {
        method: 'POST',
        json: { email: 'nope', password: 'a long enough password' },
      });
      expect(bad.status).toBe(400);
    } finally {
      await open.close();
    }
  });
});
