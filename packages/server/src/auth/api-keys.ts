import type { EntityManager } from '@mikro-orm/postgresql';
import { apiKeyPrincipal, type Principal } from './principal.js';
import { randomToken, sha256Hex } from './tokens.js';

export const API_KEY_PREFIX = 'svc_ai_';
const KEY_PATTERN = /^svc_ai_[A-Za-z0-9]{64}$/;

/** `svc_ai_` + 64 characters drawn uniformly from [A-Za-z0-9] with a CSPRNG (~381 bits). */
export const generateApiKey = (): string => randomToken(API_KEY_PREFIX, 64);

export function isWellFormedApiKey(key: string): boolean {
  return KEY_PATTERN.test(key);
}

/** Keys are stored as one SHA-256 (decision 0002). */
export const hashApiKey = sha256Hex;

/** What listings show instead of the key: the prefix and the first four characters. */
export function displayPrefix(key: string): string {
  return `${key.slice(0, API_KEY_PREFIX.length + 4)}…`;
}

/** The bearer token of an `Authorization` header, or undefined. */
export function bearerToken(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return m?.[1];
}

/**
 * The one definition of a usable key, for every statement that authenticates one: the key
 * (`k`, matched on `key_hash = ?`) must not be revoked and its workspace (`w`) must be
 * active. `from ${API_KEY_FROM} where ${ACTIVE_API_KEY_WHERE}`.
 */
export const API_KEY_FROM = 'api_keys k join workspaces w on w.id = k.workspace_id';
export const ACTIVE_API_KEY_WHERE = "k.key_hash = ? and k.revoked_at is null and w.status = 'active'";

/** `last_used_at` is written at most once per this interval per key. */
export const LAST_USED_RESOLUTION_SECONDS = 60;

/**
 * The `touch` CTE of every one-statement admission that authenticates a key (a CTE `k` with
 * the key's `id` before it): `last_used_at` written at most once per
 * `LAST_USED_RESOLUTION_SECONDS`. Never waits: a key row locked by a concurrent usage write is
 * skipped this time.
 */
export const TOUCH_API_KEY_CTE = `touch as (
         update api_keys set last_used_at = now()
          where id in (
            select a.id from api_keys a join k on k.id = a.id
             where a.last_used_at is null
                or a.last_used_at < now() - interval '${LAST_USED_RESOLUTION_SECONDS} seconds'
               for update of a skip locked)
       )`;

/**
 * Resolves a bearer key to its principal: one indexed read on the key hash, joined with the
 * workspace so a suspended workspace's keys stop working too.
 */
export async function resolveApiKey(
  em: EntityManager,
  key: string | undefined,
): Promise<Principal | undefined> {
  if (!key || !isWellFormedApiKey(key)) return undefined;
  const rows = await em.execute<
    {
      id: string;
      name: string | null;
      workspace_id: string;
      workspace_name: string;
      last_used_at: Date | null;
    }[]
  >(
    `select k.id, k.name, k.workspace_id, w.name as workspace_name, k.last_used_at
       from ${API_KEY_FROM} where ${ACTIVE_API_KEY_WHERE}`,
    [hashApiKey(key)],
  );
  const row = rows[0];
  if (!row) return undefined;
  const last = row.last_used_at ? new Date(row.last_used_at).getTime() : 0;
  if (Date.now() - last > LAST_USED_RESOLUTION_SECONDS * 1000) {
    // Off the request path: a failed bookkeeping write must not fail the request.
    void em
      .fork()
      .execute('update api_keys set last_used_at = now() where id = ?', [row.id])
      .catch(() => {});
  }
  return apiKeyPrincipal(row);
}
