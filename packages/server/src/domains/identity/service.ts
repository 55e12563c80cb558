import type { EntityManager } from '@mikro-orm/postgresql';
import { assertAcceptablePassword, hashPassword, verifyPassword } from '../../auth/passwords.js';
import {
  createSession,
  resolveSession,
  revokeSession,
  revokeSessionToken,
  rotateSession,
  type SessionMethod,
  type SessionRecord,
} from '../../auth/sessions.js';
import type { IdentitySettings } from '../../auth/settings.js';
import type { SignInThrottle } from '../../auth/throttle.js';
import { appError } from '../../errors/index.js';
import { isUuid } from '../agents/config.js';
import type { Role } from '../workspaces/entities.js';
import type { AuthSessionDto, SessionListItemDto, SignedInDto } from './schema.js';

/** Where a sign-in comes from: recorded on the session and used for throttling. */
export interface ClientInfo {
  ip: string | null;
  userAgent: string | null;
  /** A session token the request already carried: sign-in replaces (revokes) it. */
  previousToken?: string;
}

export const INVALID_CREDENTIALS = () => appError('INVALID_CREDENTIALS');
export const ACCESS_DENIED_TO_WORKSPACE = () => appError('WORKSPACE_ACCESS_DENIED');

export const normalizeEmail = (email: string) => email.trim().toLowerCase();

interface MembershipRow {
  id: string;
  name: string;
  role: Role;
}

/**
 * Sign-in, the sessions of a signed-in person and the workspace a session acts in. The token
 * of a new or rotated session is returned once; callers set the cookie.
 */
export class IdentityService {
  constructor(
    private readonly em: EntityManager,
    private readonly settings: IdentitySettings,
    /** Failed sign-in throttling (429); absent for callers that open sessions without a password. */
    private readonly throttle?: SignInThrottle,
  ) {}

  /** The user's workspaces (active ones), the oldest membership first. */
  async memberships(userId: string): Promise<MembershipRow[]> {
    return this.em.execute<MembershipRow[]>(
      `select w.id, w.name, m.role from memberships m join workspaces w on w.id = m.workspace_id
        where m.user_id = ? and w.status = 'active' order by m.created_at, w.name`,
      [userId],
    );
  }

  /**
   * Email and password. Unknown email, a user without a password and a wrong password give the
   * same 401 after the same argon2 work (`verifyPassword`), and count the same against the
   * account's and the address's failures (429 once either is used up).
   */
  async signInWithPassword(
    input: { email: string; password: string; workspaceId?: string },
    client: ClientInfo,
  ): Promise<SignedInDto> {
    const email = normalizeEmail(input.email);
    await this.throttle?.assertAllowed(email, client.ip);
    const rows = await this.em.execute<{ id: string; password_hash: string | null }[]>(
      'select id, password_hash from users where lower(email) = ?',
      [email],
    );
    const user = rows[0];
    const ok = await verifyPassword(user?.password_hash, input.password);
    if (!user || !ok) {
      await this.throttle?.failed(email, client.ip);
      throw INVALID_CREDENTIALS();
    }
    await this.throttle?.succeeded(email);
    return this.openSession(user.id, 'password', client, input.workspaceId);
  }

  /**
   * Opens a session for a user who has proven who they are, acting in `workspaceId` (which
   * must be theirs) or in their first workspace. Any session the request carried is revoked,
   * so a token planted before sign-in (session fixation) never gains the new privileges.
   */
  async openSession(
    userId: string,
    method: SessionMethod,
    client: ClientInfo,
    workspaceId?: string,
  ): Promise<SignedInDto> {
    const workspaces = await this.memberships(userId);
    let workspace: MembershipRow | undefined = workspaces[0];
    if (workspaceId !== undefined) {
      workspace = workspaces.find((w) => w.id === workspaceId);
      if (!workspace) throw ACCESS_DENIED_TO_WORKSPACE();
    }
    if (client.previousToken) await revokeSessionToken(this.em, client.previousToken);
    const { token } = await createSession(
      this.em,
      { userId, workspaceId: workspace?.id ?? null, method, ip: client.ip, userAgent: client.userAgent },
      this.settings,
    );
    return this.signedIn(token);
  }

  /** The body of a sign-in: the session as the new token resolves it, and the token. */
  private async signedIn(token: string): Promise<SignedInDto> {
    const session = await resolveSession(this.em, token, this.settings);
    if (!session) throw new Error('a session just written did not resolve');
    return { token, ...(await this.describe(session)) };
  }

  async describe(session: SessionRecord): Promise<AuthSessionDto> {
    return {
      session: {
        id: session.sessionId,
        method: session.method,
        createdAt: session.createdAt.toISOString(),
        expiresAt: session.expiresAt.toISOString(),
        idleExpiresAt: session.idleExpiresAt.toISOString(),
      },
      user: { id: session.userId, email: session.email, name: session.name },
      workspace: session.workspace,
      workspaces: await this.memberships(session.userId),
    };
  }

  /**
   * Moves the session to another of the user's workspaces. The token is rotated: the one used
   * before the switch stops working.
   */
  async switchWorkspace(session: SessionRecord, workspaceId: string): Promise<SignedInDto> {
    const target = (await this.memberships(session.userId)).find((w) => w.id === workspaceId);
    if (!target) throw ACCESS_DENIED_TO_WORKSPACE();
    const token = await rotateSession(this.em, session.sessionId, target.id);
    return this.signedIn(token);
  }

  async signOut(session: SessionRecord): Promise<void> {
    await revokeSession(this.em, session.userId, session.sessionId);
  }

  /** The user's live sessions, the newest first. */
  async listSessions(session: SessionRecord): Promise<SessionListItemDto[]> {
    const rows = await this.em.execute<
      {
        id: string;
        method: SessionMethod;
        workspace_id: string | null;
        created_at: Date;
        last_seen_at: Date;
        expires_at: Date;
        ip: string | null;
        user_agent: string | null;
      }[]
    >(
      `select id, method, workspace_id, created_at, last_seen_at, expires_at, ip, user_agent
         from user_sessions
        where user_id = ? and revoked_at is null and expires_at > now()
          and last_seen_at > now() - make_interval(secs => ?)
        order by created_at desc`,
      [session.userId, this.settings.sessionIdleSeconds],
    );
    return rows.map((r) => ({
      id: r.id,
      method: r.method,
      workspaceId: r.workspace_id,
      createdAt: new Date(r.created_at).toISOString(),
      lastSeenAt: new Date(r.last_seen_at).toISOString(),
      expiresAt: new Date(r.expires_at).toISOString(),
      ip: r.ip,
      userAgent: r.user_agent,
      current: r.id === session.sessionId,
    }));
  }

  /**
   * Self-service password change: the current password proves it is the person and not just
   * someone holding the session (wrong ones count against the account's and the address's
   * sign-in failures, 429 once used up). Every other session of the user is revoked; this one
   * stays. An account without a password (OIDC only) has none to change.
   */
  async changePassword(
    session: SessionRecord,
    input: { currentPassword: string; newPassword: string },
    client: ClientInfo,
  ): Promise<{ passwordChanged: true; sessionsRevoked: number }> {
    const email = normalizeEmail(session.email);
    await this.throttle?.assertAllowed(email, client.ip);
    const rows = await this.em.execute<{ password_hash: string | null }[]>(
      'select password_hash from users where id = ?',
      [session.userId],
    );
    const stored = rows[0]?.password_hash;
    if (!stored) {
      throw appError('NO_PASSWORD');
    }
    if (!(await verifyPassword(stored, input.currentPassword))) {
      await this.throttle?.failed(email, client.ip);
      throw appError('INVALID_CURRENT_PASSWORD');
    }
    await this.throttle?.succeeded(email);
    assertAcceptablePassword(input.newPassword);
    const hash = await hashPassword(input.newPassword);
    return this.em.transactional(async (em) => {
      await em.execute('update users set password_hash = ? where id = ?', [hash, session.userId]);
      const revoked = await em.execute(
        'update user_sessions set revoked_at = now() where user_id = ? and id <> ? and revoked_at is null returning id',
        [session.userId, session.sessionId],
      );
      return { passwordChanged: true as const, sessionsRevoked: revoked.length };
    });
  }

  /** Revokes one of the user's own sessions; 404 `Session not found` for any other id. */
  async revokeOwnSession(session: SessionRecord, sessionId: string): Promise<{ current: boolean }> {
    if (!isUuid(sessionId) || !(await revokeSession(this.em, session.userId, sessionId))) {
      throw appError('SESSION_NOT_FOUND');
    }
    return { current: sessionId === session.sessionId };
  }
}
