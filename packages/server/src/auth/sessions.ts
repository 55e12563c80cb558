import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Role } from './principal.js';
import type { IdentitySettings } from './settings.js';
import { randomToken, sha256Hex } from './tokens.js';

/**
 * Sessions of people signed in (email/password, OIDC, an accepted invitation). The token is
 * `svc_ss_` + 48 characters of [A-Za-z0-9] (~285 bits), handed out once at sign-in, sent back
 * as `Authorization: Bearer …` or in the `aisuite_session` cookie, and stored only as its
 * SHA-256 (like API keys, decision 0002). A session belongs to one user and acts in one
 * workspace at a time; the role is read from the membership on every request, so a role change
 * or a removal takes effect at once.
 */
export const SESSION_TOKEN_PREFIX = 'svc_ss_';
const SESSION_TOKEN_PATTERN = /^svc_ss_[A-Za-z0-9]{48}$/;
export const SESSION_COOKIE = 'aisuite_session';

export type SessionMethod = 'password' | 'oidc' | 'invitation' | 'signup';

export const generateSessionToken = () => randomToken(SESSION_TOKEN_PREFIX, 48);
export const isSessionToken = (token: string | undefined): token is string =>
  !!token && token.startsWith(SESSION_TOKEN_PREFIX);

/** `last_seen_at` (the idle clock) is written at most once per this interval per session. */
const LAST_SEEN_RESOLUTION_SECONDS = 60;

export interface SessionWorkspace {
  id: string;
  name: string;
  role: Role;
}

/** A live session as the authentication layer resolves it. */
export interface SessionRecord {
  sessionId: string;
  userId: string;
  email: string;
  name: string | null;
  method: SessionMethod;
  createdAt: Date;
  expiresAt: Date;
  /** When the session expires if it is not used before. */
  idleExpiresAt: Date;
  /** The workspace the session acts in; null when none is chosen or the membership is gone. */
  workspace: SessionWorkspace | null;
}

interface SessionRow {
  id: string;
  user_id: string;
  email: string;
  name: string | null;
  method: SessionMethod;
  created_at: Date;
  expires_at: Date;
  last_seen_at: Date;
  workspace_id: string | null;
  workspace_name: string | null;
  role: Role | null;
  stale: boolean;
}

/**
 * The live session of a token, or undefined: one indexed read joined with the user, the
 * membership and the workspace (a suspended workspace or a removed membership leaves the
 * session without a workspace). Expired (absolute or idle) and revoked sessions are not found.
 */
export async function resolveSession(
  em: EntityManager,
  token: string,
  settings: IdentitySettings,
): Promise<SessionRecord | undefined> {
  if (!SESSION_TOKEN_PATTERN.test(token)) return undefined;
  const rows = await em.execute<SessionRow[]>(
    `select s.id, s.user_id, u.email, u.name, s.method, s.created_at, s.expires_at, s.last_seen_at,
            w.id as workspace_id, w.name as workspace_name, m.role,
            s.last_seen_at < now() - make_interval(secs => ?) as stale
       from user_sessions s
       join users u on u.id = s.user_id
       left join memberships m on m.workspace_id = s.workspace_id and m.user_id = s.user_id
       left join workspaces w on w.id = m.workspace_id and w.status = 'active'
      where s.token_hash = ? and s.revoked_at is null and s.expires_at > now()
        and s.last_seen_at > now() - make_interval(secs => ?)`,
    [LAST_SEEN_RESOLUTION_SECONDS, sha256Hex(token), settings.sessionIdleSeconds],
  );
  const row = rows[0];
  if (!row) return undefined;
  let lastSeen = new Date(row.last_seen_at);
  if (row.stale) {
    lastSeen = new Date();
    // Off the request path: a failed bookkeeping write must not fail the request.
    void em
      .fork()
      .execute('update user_sessions set last_seen_at = now() where id = ?', [row.id])
      .catch(() => {});
  }
  return toRecord(row, lastSeen, settings);
}

function toRecord(row: SessionRow, lastSeen: Date, settings: IdentitySettings): SessionRecord {
  const expiresAt = new Date(row.expires_at);
  const idle = new Date(lastSeen.getTime() + settings.sessionIdleSeconds * 1000);
  return {
    sessionId: row.id,
    userId: row.user_id,
    email: row.email,
    name: row.name,
    method: row.method,
    createdAt: new Date(row.created_at),
    expiresAt,
    idleExpiresAt: idle < expiresAt ? idle : expiresAt,
    workspace:
      row.workspace_id && row.role
        ? { id: row.workspace_id, name: row.workspace_name ?? '', role: row.role }
        : null,
  };
}

export interface NewSession {
  userId: string;
  workspaceId: string | null;
  method: SessionMethod;
  ip?: string | null;
  userAgent?: string | null;
}

/** Opens a session; returns its token (shown once) and its id. */
export async function createSession(
  em: EntityManager,
  input: NewSession,
  settings: IdentitySettings,
): Promise<{ token: string; sessionId: string }> {
  const token = generateSessionToken();
  const sessionId = randomUUID();
  await em.execute(
    `insert into user_sessions (id, user_id, workspace_id, token_hash, method, expires_at, ip, user_agent)
     values (?, ?, ?, ?, ?, now() + make_interval(secs => ?), ?, ?)`,
    [
      sessionId,
      input.userId,
      input.workspaceId,
      sha256Hex(token),
      input.method,
      settings.sessionMaxAgeSeconds,
      input.ip?.slice(0, 64) ?? null,
      input.userAgent?.slice(0, 512) ?? null,
    ],
  );
  return { token, sessionId };
}

/** Revokes a session of a user; false when it is not theirs, unknown or already revoked. */
export async function revokeSession(em: EntityManager, userId: string, sessionId: string): Promise<boolean> {
  const rows = await em.execute<{ id: string }[]>(
    'update user_sessions set revoked_at = now() where id = ? and user_id = ? and revoked_at is null returning id',
    [sessionId, userId],
  );
  return rows.length > 0;
}

/** Revokes the session a token names, if any (sign-in revokes the one it replaces). */
export async function revokeSessionToken(em: EntityManager, token: string): Promise<void> {
  if (!SESSION_TOKEN_PATTERN.test(token)) return;
  await em.execute(
    'update user_sessions set revoked_at = now() where token_hash = ? and revoked_at is null',
    [sha256Hex(token)],
  );
}

/**
 * Gives a session a new token (the old one stops working at once) and, optionally, another
 * workspace: what a change of privileges does, so a token seen before the change cannot carry
 * the new privileges. The session keeps its id and its absolute expiry.
 */
export async function rotateSession(
  em: EntityManager,
  sessionId: string,
  workspaceId: string | null,
): Promise<string> {
  const token = generateSessionToken();
  await em.execute(
    'update user_sessions set token_hash = ?, workspace_id = ?, last_seen_at = now() where id = ?',
    [sha256Hex(token), workspaceId, sessionId],
  );
  return token;
}
