import type { EntityManager } from '@mikro-orm/postgresql';
import { appError } from '../errors/index.js';
import type { Principal } from './principal.js';
import { randomToken, sha256Hex } from './tokens.js';

/**
 * Widget tokens: short-lived bearer tokens for browser widgets, accepted only by the Apps
 * endpoints. Opaque random strings (`svc_wt_` + 48 characters of [A-Za-z0-9], ~285 bits)
 * stored as a SHA-256 hash, so every use is checked against the database: revocation,
 * expiry, allowed origins and the request cap take effect on the next request.
 */
export const WIDGET_TOKEN_PREFIX = 'svc_wt_';
const TOKEN_PATTERN = /^svc_wt_[A-Za-z0-9]{48}$/;

export const generateWidgetToken = (): string => randomToken(WIDGET_TOKEN_PREFIX, 48);

export const isWidgetToken = (token: string | undefined): token is string =>
  !!token && token.startsWith(WIDGET_TOKEN_PREFIX);

export const hashWidgetToken = sha256Hex;

export const widgetTokenDisplayPrefix = (token: string) =>
  `${token.slice(0, WIDGET_TOKEN_PREFIX.length + 4)}…`;

/** `https://example.com:8443` form: scheme, host and non-default port, no path. */
export function normalizeOrigin(input: string): string | undefined {
  try {
    const u = new URL(input);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return undefined;
    if (u.username || u.password) return undefined;
    if ((u.pathname !== '/' && u.pathname !== '') || u.search || u.hash) return undefined;
    return u.origin;
  } catch {
    return undefined;
  }
}

/**
 * Resolves a widget token for one request, or throws: 401 `Invalid widget token` (unknown,
 * malformed, revoked, workspace suspended), 401 `Widget token expired`, 403 `Origin not allowed`,
 * 429 `Widget token request limit reached`. Counting the request and checking the cap are one
 * statement, so concurrent requests cannot overshoot it.
 */
export async function resolveWidgetToken(
  em: EntityManager,
  token: string,
  origin: string | undefined,
): Promise<Principal> {
  if (!TOKEN_PATTERN.test(token)) throw appError('WIDGET_TOKEN_INVALID');
  const rows = await em.execute<
    {
      id: string;
      workspace_id: string;
      workspace_name: string;
      app_id: string | null;
      subject: string | null;
      allowed_origins: string[];
      expired: boolean;
    }[]
  >(
    `select t.id, t.workspace_id, w.name as workspace_name, t.app_id, t.subject, t.allowed_origins,
            t.expires_at <= now() as expired
       from widget_tokens t join workspaces w on w.id = t.workspace_id
      where t.token_hash = ? and t.revoked_at is null and w.status = 'active'`,
    [hashWidgetToken(token)],
  );
  const row = rows[0];
  if (!row) throw appError('WIDGET_TOKEN_INVALID');
  if (row.expired) throw appError('WIDGET_TOKEN_EXPIRED');
  const allowed = row.allowed_origins ?? [];
  if (allowed.length > 0) {
    const given = origin ? normalizeOrigin(origin) : undefined;
    if (!given || !allowed.includes(given)) {
      throw appError('WIDGET_ORIGIN_NOT_ALLOWED');
    }
  }
  const counted = await em.execute<{ id: string }[]>(
    `update widget_tokens set request_count = request_count + 1, last_used_at = now()
      where id = ? and (max_requests is null or request_count < max_requests) returning id`,
    [row.id],
  );
  if (counted.length === 0) {
    throw appError('WIDGET_TOKEN_LIMIT_REACHED');
  }
  return {
    via: 'widget',
    workspaceId: row.workspace_id,
    workspaceName: row.workspace_name,
    widgetTokenId: row.id,
    ...(row.app_id ? { appId: row.app_id } : {}),
    ...(row.subject ? { widgetSubject: row.subject } : {}),
  };
}
