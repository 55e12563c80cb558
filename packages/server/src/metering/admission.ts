import { randomUUID } from 'node:crypto';
import { ACTIVE_API_KEY_WHERE, API_KEY_FROM, TOUCH_API_KEY_CTE } from '../auth/api-keys.js';
import { apiKeyPrincipal } from '../auth/principal.js';
import type { SqlExecutor } from '../db/sql.js';
import { appError } from '../errors/index.js';
import { CYCLE_START_SQL } from './cycle.js';
import { rateLimitCte, rateLimitCteParams, rateLimitHeaders, shardedRateLimit } from './rate-limit.js';
import type { MeteringSettings, RateLimitRule } from './settings.js';
import type { KeyAdmission, RateLimitBucket } from './types.js';

/** How long a `/chat` quota reservation counts if its process dies before releasing it. */
export const RESERVATION_TTL_SECONDS = 900;

/**
 * The quota reservation's CTEs over `k` (`workspace_id`, `quota`, `cs`): `res` adds `?::bigint`
 * tokens to the cycle's reserved count for the rows of `k` meeting `where` (its own `?`
 * parameters next), only while used plus reserved is below the quota; `resrow` records the
 * reservation (`?::uuid`, `?::bigint`) that the usage record releases.
 */
const reservationCtes = (where: string) => `res as (
         insert into workspace_token_usage as t (workspace_id, cycle_start, tokens, reserved)
         select k.workspace_id, k.cs, 0, ?::bigint from k where ${where}
         on conflict (workspace_id, cycle_start) do update set reserved = t.reserved + excluded.reserved
          where t.tokens + t.reserved < (select quota from k)
         returning workspace_id, cycle_start
       ), resrow as (
         insert into token_reservations (id, workspace_id, cycle_start, tokens, expires_at)
         select ?::uuid, workspace_id, cycle_start, ?::bigint, now() + interval '${RESERVATION_TTL_SECONDS} seconds'
           from res
       )`;

/** What an admission statement answers for a request whose key resolved. */
export interface AdmissionRow {
  id: string;
  name: string | null;
  workspace_id: string;
  workspace_name: string;
  quota: string | null;
  cs: Date | string;
  hits: number | null;
  reset_in: string | number | null;
}

/**
 * The up-front checks of a token-metered API-key request (`POST /chat`) in ONE statement:
 * resolves the key (active key of an active workspace; refreshes `last_used_at` at most once
 * a minute), takes a unit from the workspace's rate-limit bucket when `admit` is set (an
 * invalid request spends none) and, when the workspace has a token quota and the request is
 * within its rate limit, reserves `reserveTokens` of it: only while the tokens used in the
 * cycle plus those reserved by requests in flight are below the quota (a conditional upsert
 * on the cycle's row, so concurrent admissions serialise and each sees what the previous
 * reserved), with a reservation row the usage record releases. Undefined when the key does
 * not resolve (401). Otherwise the caller checks, in this order, its own 400s, then
 * `limit()` (429) and `quota()` (403), and passes `reservationId` to `record`.
 */
export async function admitKeyRequest(
  db: () => SqlExecutor,
  rules: MeteringSettings['rateLimits'],
  keyHash: string,
  bucket: RateLimitBucket,
  admit: boolean,
  reserveTokens = 1,
): Promise<KeyAdmission | undefined> {
  const rule = rules[bucket];
  const limited = admit && !!rule && rule.limit > 0;
  const w = rule?.windowSeconds ?? 60;
  const sharded = shardedRateLimit(limited, rule?.limit ?? 0);
  const reservationId = randomUUID();
  const rows = await db().execute<(AdmissionRow & { reserved: boolean })[]>(
    `with async_commit as (select set_config('synchronous_commit', 'off', true) as v), k as (
         select k.id, k.name, k.workspace_id, w.name as workspace_name,
                w.monthly_token_quota as quota, ${CYCLE_START_SQL('w.billing_cycle_anchor')} as cs
           from ${API_KEY_FROM} cross join async_commit
          where ${ACTIVE_API_KEY_WHERE}
       ), ${TOUCH_API_KEY_CTE}, ${rateLimitCte('?::boolean', sharded)}, ${reservationCtes('?::boolean and k.quota is not null and k.quota > 0 and (not ?::boolean or (select hits from rl) <= ?::int)')}
       select k.*, rl.hits, rl.reset_in, exists (select 1 from res) as reserved
         from k
         left join rl on true`,
    [
      keyHash,
      ...rateLimitCteParams(`${bucket}:`, w, sharded, [limited]),
      Math.max(1, Math.ceil(reserveTokens)),
      admit,
      limited,
      rule?.limit ?? 0,
      reservationId,
      Math.max(1, Math.ceil(reserveTokens)),
    ],
  );
  const row = rows[0];
  if (!row) return undefined;
  const reserved = row.reserved === true || String(row.reserved) === 't' || String(row.reserved) === 'true';
  return admissionOf(row, { limited, rule, bucket, reservationId: reserved ? reservationId : null });
}

/**
 * A `KeyAdmission` from an admission statement's row: `hits` and `reset_in` are the rate-limit
 * window's (read when `limited`), and a request of a workspace with a quota (`quota` not null)
 * without a reservation is refused by `quota()`.
 */
export function admissionOf(
  row: AdmissionRow,
  o: {
    limited: boolean;
    rule: RateLimitRule | undefined;
    bucket: RateLimitBucket;
    reservationId: string | null;
  },
): KeyAdmission {
  const { limited, rule, bucket, reservationId } = o;
  return {
    principal: apiKeyPrincipal(row),
    cycleStart: new Date(row.cs),
    reservationId,
    limit: () =>
      limited && rule ? rateLimitHeaders(rule, Number(row.hits), Number(row.reset_in), bucket) : {},
    quota: () => {
      if (row.quota !== null && reservationId === null) throw appError('TOKEN_LIMIT_EXCEEDED');
    },
  };
}

/**
 * The `/chat` quota reservation on its own (callers authenticated otherwise than by key,
 * whose rate limit was taken already): the same conditional upsert as `admitKeyRequest`.
 * `reservationId` null with a quota set means the quota is spent (403).
 */
export async function reserveQuota(
  db: () => SqlExecutor,
  workspaceId: string,
  reserveTokens: number,
): Promise<{ quota: number | null; cycleStart: Date; reservationId: string | null }> {
  const reservationId = randomUUID();
  const tokens = Math.max(1, Math.ceil(reserveTokens));
  const rows = await db().execute<{ quota: string | null; cs: Date | string; reserved: boolean }[]>(
    `with k as (
         select w.id as workspace_id, w.monthly_token_quota as quota, ${CYCLE_START_SQL('w.billing_cycle_anchor')} as cs
           from workspaces w where w.id = ?
       ), ${reservationCtes('k.quota is not null and k.quota > 0')}
       select k.quota, k.cs, exists (select 1 from res) as reserved from k`,
    [workspaceId, tokens, reservationId, tokens],
  );
  const row = rows[0];
  if (!row) throw appError('WORKSPACE_NOT_FOUND');
  const reserved = row.reserved === true || String(row.reserved) === 't' || String(row.reserved) === 'true';
  return {
    quota: row.quota === null ? null : Number(row.quota),
    cycleStart: new Date(row.cs),
    reservationId: reserved ? reservationId : null,
  };
}
