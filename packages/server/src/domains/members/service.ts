import { randomBytes, randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { Mailer } from '../../auth/mailer.js';
import { assertAcceptablePassword, hashPassword, verifyPassword } from '../../auth/passwords.js';
import type { SessionRecord } from '../../auth/sessions.js';
import type { IdentitySettings } from '../../auth/settings.js';
import type { SignInThrottle } from '../../auth/throttle.js';
import { appError } from '../../errors/index.js';
import { isUuid } from '../agents/config.js';
import { INVALID_CREDENTIALS, normalizeEmail } from '../identity/service.js';
import type { Role } from '../workspaces/entities.js';
import { invitationIdOf, signInvitation, verifyInvitation } from './invitation-token.js';

/** Who changes memberships: a person through a session (roles apply) or the operator CLI. */
export type Actor = { kind: 'person'; userId: string; role: Role } | { kind: 'operator' };

const LAST_OWNER = () => appError('LAST_OWNER');
const INVITATION_INVALID = () => appError('INVITATION_INVALID');
const EMAIL_PATTERN = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

export interface MemberDto {
  userId: string;
  email: string;
  name: string | null;
  role: Role;
  joinedAt: string;
}

export type InvitationStatus = 'pending' | 'accepted' | 'revoked' | 'expired';

export interface InvitationDto {
  id: string;
  workspaceId: string;
  email: string;
  role: Role;
  status: InvitationStatus;
  invitedBy: string | null;
  createdAt: string;
  expiresAt: string;
  acceptedAt: string | null;
}

interface InvitationRow {
  id: string;
  workspace_id: string;
  email: string;
  role: Role;
  invited_by: string | null;
  created_at: Date;
  expires_at: Date;
  accepted_at: Date | null;
  revoked_at: Date | null;
  expired: boolean;
}

const iso = (d: Date | string) => new Date(d).toISOString();

function statusOf(r: InvitationRow): InvitationStatus {
  if (r.accepted_at) return 'accepted';
  if (r.revoked_at) return 'revoked';
  if (r.expired) return 'expired';
  return 'pending';
}

const toInvitationDto = (r: InvitationRow): InvitationDto => ({
  id: r.id,
  workspaceId: r.workspace_id,
  email: r.email,
  role: r.role,
  status: statusOf(r),
  invitedBy: r.invited_by,
  createdAt: iso(r.created_at),
  expiresAt: iso(r.expires_at),
  acceptedAt: r.accepted_at ? iso(r.accepted_at) : null,
});

export function assertEmail(email: string): string {
  const normalized = normalizeEmail(email);
  if (!EMAIL_PATTERN.test(normalized) || normalized.length > 320) {
    throw appError('INVALID_EMAIL');
  }
  return normalized;
}

/**
 * Members, roles and invitations of a workspace, and sign-up. Rules: owners and admins manage
 * members; only an owner grants, changes or removes the owner role; a person may always leave;
 * a workspace always keeps one owner (checked under a lock of the workspace row, so two
 * concurrent demotions cannot both pass).
 */
export class MembersService {
  constructor(
    private readonly em: EntityManager,
    private readonly settings: IdentitySettings,
    private readonly signingSecret: string,
    private readonly throttle?: SignInThrottle,
  ) {}

  private assertManager(actor: Actor): void {
    if (actor.kind === 'person' && actor.role !== 'owner' && actor.role !== 'admin') {
      throw appError('MEMBERS_FORBIDDEN');
    }
  }

  /** The workspace's members, or only the one with `userId` (a UUID, in any case). */
  async listMembers(workspaceId: string, userId?: string): Promise<MemberDto[]> {
    const rows = await this.em.execute<
      { user_id: string; email: string; name: string | null; role: Role; created_at: Date }[]
    >(
      `select m.user_id, u.email, u.name, m.role, m.created_at
         from memberships m join users u on u.id = m.user_id
        where m.workspace_id = ?${userId ? ' and m.user_id = ?' : ''} order by m.created_at, u.email`,
      userId ? [workspaceId, userId] : [workspaceId],
    );
    return rows.map((r) => ({
      userId: r.user_id,
      email: r.email,
      name: r.name,
      role: r.role,
      joinedAt: iso(r.created_at),
    }));
  }

  /**
   * Locks the workspace row and reads, in one query, the target's membership (404 `Member not
   * found`) and the acting person's role as it is now (`lockedActor`).
   */
  private async lockMember(em: EntityManager, workspaceId: string, userId: string, actor: Actor) {
    await em.execute('select id from workspaces where id = ? for update', [workspaceId]);
    const roles = await this.roles(em, workspaceId, [
      ...(isUuid(userId) ? [userId] : []),
      ...(actor.kind === 'person' ? [actor.userId] : []),
    ]);
    const role = roles.get(userId.toLowerCase());
    if (!role) throw appError('MEMBER_NOT_FOUND');
    return { role, actor: this.actorNow(actor, roles) };
  }

  /**
   * The acting person's role read under the workspace lock (taken by the caller): a role changed
   * while the request waited for the lock (two owners demoting each other at once) decides, not
   * the role read when it authenticated. Operators pass unchanged.
   */
  private async lockedActor(em: EntityManager, workspaceId: string, actor: Actor): Promise<Actor> {
    if (actor.kind !== 'person') return actor;
    return this.actorNow(actor, await this.roles(em, workspaceId, [actor.userId]));
  }

  /** `actor` with its role in `roles`; 403 for a person who is no longer a member. */
  private actorNow(actor: Actor, roles: Map<string, Role>): Actor {
    if (actor.kind !== 'person') return actor;
    const role = roles.get(actor.userId.toLowerCase());
    if (!role) throw appError('MEMBERS_FORBIDDEN');
    return { ...actor, role };
  }

  /** The roles of these users in the workspace, by lower-case id (absent: not a member). */
  private async roles(em: EntityManager, workspaceId: string, userIds: string[]): Promise<Map<string, Role>> {
    if (userIds.length === 0) return new Map();
    const rows = await em.execute<{ user_id: string; role: Role }[]>(
      `select user_id, role from memberships where workspace_id = ? and user_id in (${userIds.map(() => '?').join(', ')})`,
      [workspaceId, ...userIds],
    );
    return new Map(rows.map((r) => [r.user_id, r.role]));
  }

  private async ownerCount(em: EntityManager, workspaceId: string): Promise<number> {
    const rows = await em.execute<{ n: string }[]>(
      "select count(*) as n from memberships where workspace_id = ? and role = 'owner'",
      [workspaceId],
    );
    return Number(rows[0]?.n ?? 0);
  }

  async changeRole(actor: Actor, workspaceId: string, userId: string, role: Role): Promise<MemberDto> {
    this.assertManager(actor);
    await this.em.transactional(async (em) => {
      const { role: current, actor: now } = await this.lockMember(em, workspaceId, userId, actor);
      this.assertManager(now);
      if (now.kind === 'person' && (current === 'owner' || role === 'owner') && now.role !== 'owner') {
        throw appError('OWNER_ONLY');
      }
      if (current === role) return;
      if (current === 'owner' && (await this.ownerCount(em, workspaceId)) <= 1) throw LAST_OWNER();
      await em.execute('update memberships set role = ? where workspace_id = ? and user_id = ?', [
        role,
        workspaceId,
        userId,
      ]);
    });
    const [member] = await this.listMembers(workspaceId, userId);
    if (!member) throw appError('MEMBER_NOT_FOUND');
    return member;
  }

  /** Removes a member (owners and admins), or the actor themself (leaving). */
  async removeMember(actor: Actor, workspaceId: string, userId: string): Promise<void> {
    const leaving = actor.kind === 'person' && actor.userId === userId;
    if (!leaving) this.assertManager(actor);
    await this.em.transactional(async (em) => {
      const { role: current, actor: now } = await this.lockMember(em, workspaceId, userId, actor);
      if (!leaving) this.assertManager(now);
      if (!leaving && now.kind === 'person' && current === 'owner' && now.role !== 'owner') {
        throw appError('OWNER_ONLY');
      }
      if (current === 'owner' && (await this.ownerCount(em, workspaceId)) <= 1) throw LAST_OWNER();
      await em.execute('delete from memberships where workspace_id = ? and user_id = ?', [
        workspaceId,
        userId,
      ]);
    });
  }

  // ---------- invitations ----------

  /** The link a person opens: the console page, the token in its fragment (never sent to servers). */
  invitationLink(token: string, publicOrigin: string): string {
    const base = this.settings.invitationUrl ?? `${publicOrigin.replace(/\/+$/, '')}/invitations/accept`;
    return `${base}#token=${token}`;
  }

  /**
   * Invites `email` as `role`: returns the signed, single-use link (valid for
   * `AUTH_INVITATION_TTL_SECONDS`) and mails it when SMTP is configured. A new invitation to
   * the same email replaces (revokes) the pending one.
   */
  async invite(
    actor: Actor,
    workspaceId: string,
    input: { email: string; role: Role },
    publicOrigin: string,
    log?: { warn: (obj: object, msg: string) => void },
  ): Promise<{ invitation: InvitationDto; token: string; url: string; mailed: boolean }> {
    this.assertManager(actor);
    if (actor.kind === 'person' && input.role === 'owner' && actor.role !== 'owner') {
      throw appError('OWNER_ONLY');
    }
    const email = assertEmail(input.email);
    const id = randomUUID();
    // Whole seconds: the signature covers the expiry in seconds.
    const expiresAt = new Date(Math.floor(Date.now() / 1000 + this.settings.invitationTtlSeconds) * 1000);
    const workspaceName = await this.em.transactional(async (em) => {
      const ws = await em.execute<{ name: string }[]>(
        "select name from workspaces where id = ? and status = 'active' for update",
        [workspaceId],
      );
      if (!ws[0]) throw appError('WORKSPACE_NOT_FOUND');
      const now = await this.lockedActor(em, workspaceId, actor);
      this.assertManager(now);
      if (now.kind === 'person' && input.role === 'owner' && now.role !== 'owner')
        throw appError('OWNER_ONLY');
      const member = await em.execute(
        `select 1 from memberships m join users u on u.id = m.user_id
          where m.workspace_id = ? and lower(u.email) = ?`,
        [workspaceId, email],
      );
      if (member.length > 0) throw appError('ALREADY_MEMBER');
      await em.execute(
        `update invitations set revoked_at = now()
          where workspace_id = ? and lower(email) = ? and accepted_at is null and revoked_at is null`,
        [workspaceId, email],
      );
      await em.execute(
        `insert into invitations (id, workspace_id, email, role, invited_by, expires_at)
         values (?, ?, ?, ?, ?, ?)`,
        [id, workspaceId, email, input.role, actor.kind === 'person' ? actor.userId : null, expiresAt],
      );
      return ws[0].name;
    });
    const token = signInvitation(this.signingSecret, { id, workspaceId, email, role: input.role, expiresAt });
    const url = this.invitationLink(token, publicOrigin);
    let mailed = false;
    const mailer = new Mailer(this.settings.mail);
    if (mailer.enabled) {
      try {
        mailed = await mailer.send({
          to: email,
          subject: `You are invited to ${workspaceName} on AI Suite`,
          text:
            `You have been invited to join the workspace "${workspaceName}" as ${input.role}.\n\n` +
            `Accept the invitation: ${url}\n\n` +
            `The link works once and expires on ${expiresAt.toISOString()}.\n`,
        });
      } catch (err) {
        log?.warn({ err: (err as Error).message, invitationId: id }, 'invitation mail not sent');
      } finally {
        mailer.close();
      }
    }
    return { invitation: await this.requireInvitation(workspaceId, id), token, url, mailed };
  }

  private async invitationRows(where: string, params: unknown[]): Promise<InvitationRow[]> {
    return this.em.execute<InvitationRow[]>(
      `select id, workspace_id, email, role, invited_by, created_at, expires_at, accepted_at, revoked_at,
              expires_at <= now() as expired
         from invitations where ${where}`,
      params,
    );
  }

  private async requireInvitation(workspaceId: string, id: string): Promise<InvitationDto> {
    const rows = isUuid(id)
      ? await this.invitationRows('id = ? and workspace_id = ?', [id, workspaceId])
      : [];
    if (!rows[0]) throw appError('INVITATION_NOT_FOUND');
    return toInvitationDto(rows[0]);
  }

  /** The workspace's invitations, newest first (the last 200). */
  async listInvitations(actor: Actor, workspaceId: string): Promise<InvitationDto[]> {
    this.assertManager(actor);
    const rows = await this.invitationRows('workspace_id = ? order by created_at desc limit 200', [
      workspaceId,
    ]);
    return rows.map(toInvitationDto);
  }

  async revokeInvitation(actor: Actor, workspaceId: string, id: string): Promise<InvitationDto> {
    this.assertManager(actor);
    if (isUuid(id)) {
      await this.em.execute(
        'update invitations set revoked_at = now() where id = ? and workspace_id = ? and accepted_at is null and revoked_at is null',
        [id, workspaceId],
      );
    }
    return this.requireInvitation(workspaceId, id);
  }

  /**
   * The pending invitation a token names, its signature checked; the same 400
   * `Invalid or expired invitation` for a forged, unknown, used, revoked or expired one.
   */
  private async pendingInvitation(token: string) {
    const id = typeof token === 'string' ? invitationIdOf(token) : undefined;
    if (!id) throw INVITATION_INVALID();
    const rows = await this.em.execute<(InvitationRow & { workspace_name: string })[]>(
      `select i.id, i.workspace_id, i.email, i.role, i.invited_by, i.created_at, i.expires_at, i.accepted_at,
              i.revoked_at, i.expires_at <= now() as expired, w.name as workspace_name
         from invitations i join workspaces w on w.id = i.workspace_id and w.status = 'active'
        where i.id = ?`,
      [id],
    );
    const row = rows[0];
    if (
      !row ||
      !verifyInvitation(this.signingSecret, token, {
        id: row.id,
        workspaceId: row.workspace_id,
        email: row.email,
        role: row.role,
        expiresAt: new Date(row.expires_at),
      }) ||
      statusOf(row) !== 'pending'
    ) {
      throw INVITATION_INVALID();
    }
    return row;
  }

  /** What an invitation link offers, for the page that accepts it. */
  async previewInvitation(token: string) {
    const row = await this.pendingInvitation(token);
    const users = await this.em.execute('select 1 from users where lower(email) = ?', [row.email]);
    return {
      workspace: { id: row.workspace_id, name: row.workspace_name },
      email: row.email,
      role: row.role,
      expiresAt: iso(row.expires_at),
      accountExists: users.length > 0,
    };
  }

  /**
   * Accepts an invitation: the invited email's existing account joins (the caller proves it is
   * that person with a session of theirs or their password), or a new account is created with
   * `password`. The invitation is consumed in the same transaction as the membership, so a link
   * works once even when used twice at the same moment.
   */
  async acceptInvitation(
    token: string,
    input: { password?: string; name?: string | null },
    caller: SessionRecord | undefined,
    address: string | null = null,
  ): Promise<{ userId: string; workspaceId: string; created: boolean }> {
    const inv = await this.pendingInvitation(token);
    const users = await this.em.execute<{ id: string; password_hash: string | null }[]>(
      'select id, password_hash from users where lower(email) = ?',
      [inv.email],
    );
    const existing = users[0];
    let newHash: string | undefined;
    if (existing) {
      if (caller?.userId !== existing.id) {
        if (input.password === undefined) {
          throw appError('SIGN_IN_REQUIRED');
        }
        // A password guess like a sign-in: throttled and counted the same way.
        await this.throttle?.assertAllowed(inv.email, address);
        if (!(await verifyPassword(existing.password_hash, input.password))) {
          await this.throttle?.failed(inv.email, address);
          throw INVALID_CREDENTIALS();
        }
        await this.throttle?.succeeded(inv.email);
      }
    } else {
      if (input.password === undefined) {
        throw appError('PASSWORD_REQUIRED');
      }
      assertAcceptablePassword(input.password);
      newHash = await hashPassword(input.password);
    }
    return this.em.transactional(async (em) => {
      const consumed = await em.execute(
        `update invitations set accepted_at = now()
          where id = ? and accepted_at is null and revoked_at is null and expires_at > now() returning id`,
        [inv.id],
      );
      if (consumed.length === 0) throw INVITATION_INVALID();
      let userId = existing?.id;
      if (!userId) {
        userId = randomUUID();
        const inserted = await em.execute(
          `insert into users (id, email, password_hash, name) values (?, ?, ?, ?)
           on conflict ((lower(email))) do nothing returning id`,
          [userId, inv.email, newHash, input.name?.trim() || null],
        );
        if (inserted.length === 0) throw appError('ACCOUNT_JUST_CREATED_SIGN_IN_FIRST');
      }
      await em.execute('update invitations set accepted_by = ? where id = ?', [userId, inv.id]);
      await em.execute(
        `insert into memberships (workspace_id, user_id, role) values (?, ?, ?)
         on conflict (workspace_id, user_id) do nothing`,
        [inv.workspace_id, userId, inv.role],
      );
      return { userId, workspaceId: inv.workspace_id, created: !existing };
    });
  }

  // ---------- sign-up ----------

  /**
   * Open sign-up (`AUTH_SIGNUP_ENABLED`): a new account and a workspace of its own, as owner.
   * Off by default: 403 `Sign-up is disabled`.
   */
  async signUp(input: {
    email: string;
    password: string;
    name?: string | null;
    workspaceName?: string;
  }): Promise<{ userId: string; workspaceId: string }> {
    if (!this.settings.signupEnabled) throw appError('SIGNUP_DISABLED');
    const email = assertEmail(input.email);
    assertAcceptablePassword(input.password);
    const passwordHash = await hashPassword(input.password);
    const explicit = input.workspaceName?.trim();
    return this.em.transactional(async (em) => {
      const userId = randomUUID();
      const inserted = await em.execute(
        `insert into users (id, email, password_hash, name) values (?, ?, ?, ?)
         on conflict ((lower(email))) do nothing returning id`,
        [userId, email, passwordHash, input.name?.trim() || null],
      );
      if (inserted.length === 0) throw appError('EMAIL_TAKEN');
      const workspaceId = await createOwnWorkspace(em, userId, email, explicit);
      return { userId, workspaceId };
    });
  }
}

/**
 * The workspace a person who signs up owns: named `explicit`, or after the email with a random
 * suffix. Runs in the caller's transaction.
 */
export async function createOwnWorkspace(
  em: EntityManager,
  userId: string,
  email: string,
  explicit?: string,
): Promise<string> {
  const workspaceId = randomUUID();
  const name = explicit || `${email.split('@')[0]}'s workspace ${randomBytes(3).toString('hex')}`;
  const ws = await em.execute(
    'insert into workspaces (id, name) values (?, ?) on conflict ((lower(name))) do nothing returning id',
    [workspaceId, name],
  );
  if (ws.length === 0) throw appError('WORKSPACE_NAME_TAKEN', { name });
  await em.execute("insert into memberships (workspace_id, user_id, role) values (?, ?, 'owner')", [
    workspaceId,
    userId,
  ]);
  return workspaceId;
}
