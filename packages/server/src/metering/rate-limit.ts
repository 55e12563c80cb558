import { randomInt } from 'node:crypto';
import type { SqlExecutor } from '../db/sql.js';
import { appError } from '../errors/index.js';
import { countRateLimited } from '../telemetry/metrics.js';
import type { MeteringSettings, RateLimitRule } from './settings.js';
import type { RateLimitBucket } from './types.js';

/**
 * The fixed-window counter as one upsert: `rows` yields `(key, window_start, units)` (placeholders:
 * the key, then the window length twice via `RATE_LIMIT_WINDOW_START`), one row per key; the
 * units are added to the window's count (a new window starts at them), and the RETURNING
 * clause adds the hits and the seconds to the window's end (one more window-length placeholder).
 */
export const RATE_LIMIT_WINDOW_START = 'to_timestamp(floor(extract(epoch from now()) / ?) * ?)';
export const rateLimitUpsert = (
  rows: string,
  returning = 'hits',
) => `insert into rate_limit_windows as r (key, window_start, hits)
       ${rows}
       on conflict (key) do update set
         hits = case when r.window_start = excluded.window_start then r.hits + excluded.hits else excluded.hits end,
         window_start = excluded.window_start
       returning ${returning}, extract(epoch from (window_start - now())) + ? as reset_in`;
const RATE_LIMIT_UPSERT = rateLimitUpsert(`values (?, ${RATE_LIMIT_WINDOW_START}, 1)`);

/**
 * From this limit per window on, an admission statement counts a bucket's window over
 * `RATE_LIMIT_SHARDS` rows (decision 0031). The unit is an upsert that locks its row
 * until the statement commits, and an admission statement takes it first: with one row, every
 * admission of the workspace waited for the one before to commit. A request takes its unit on
 * a row picked at random and adds the other rows' counts as its statement sees them, so
 * requests in flight together can pass the limit by at most their number at the moment it is
 * crossed — nothing at limits below this one, where the count stays exact on one row.
 */
export const SHARDED_RATE_LIMIT_MIN = 10_000;
export const RATE_LIMIT_SHARDS = 8;

/**
 * The `rl` CTE (`hits`, `reset_in`) of an admission statement: one unit of the bucket's
 * current window taken for each row of `k` that meets `where` (a condition with its own `?`
 * parameters). `sharded` (the rule's limit ≥ `SHARDED_RATE_LIMIT_MIN`) spreads the count over
 * `RATE_LIMIT_SHARDS` rows. Parameters: `rateLimitCteParams`.
 */
export const rateLimitCte = (where: string, sharded: boolean): string =>
  sharded
    ? `rl_own as (
         ${rateLimitUpsert(
           `select ? || k.workspace_id::text || ?, ${RATE_LIMIT_WINDOW_START}, 1 from k where ${where}`,
           'key, window_start, hits',
         )}
       ), rl as (
         select (o.hits + coalesce((
                  select sum(x.hits) from rate_limit_windows x
                   where x.window_start = o.window_start and x.key <> o.key
                     and x.key in (select ? || k.workspace_id::text || ':s' || g from k, generate_series(0, ?::int) g)
                ), 0))::int as hits, o.reset_in
           from rl_own o
       )`
    : `rl as (
         ${rateLimitUpsert(`select ? || k.workspace_id::text, ${RATE_LIMIT_WINDOW_START}, 1 from k where ${where}`)}
       )`;

/** The suffix of the shard a sharded admission takes its unit on, picked at random. */
export const shardSuffix = (): string => `:s${randomInt(RATE_LIMIT_SHARDS)}`;

/** `rateLimitCte`'s parameters: the bucket's key prefix (`agent_message:`), `where`'s own. */
export const rateLimitCteParams = (
  prefix: string,
  windowSeconds: number,
  sharded: boolean,
  whereParams: unknown[],
): unknown[] =>
  sharded
    ? [
        prefix,
        shardSuffix(),
        windowSeconds,
        windowSeconds,
        ...whereParams,
        windowSeconds,
        prefix,
        RATE_LIMIT_SHARDS - 1,
      ]
    : [prefix, windowSeconds, windowSeconds, ...whereParams, windowSeconds];

/** Whether a bucket's count is spread over `RATE_LIMIT_SHARDS` rows (`rateLimitCte`). */
export const shardedRateLimit = (limited: boolean, limit: number): boolean =>
  limited && limit >= SHARDED_RATE_LIMIT_MIN;

/** `RATE_LIMIT_UPSERT` over the rows of a sharded bucket (`Metering.rateLimit`). */
const RATE_LIMIT_SHARDED = `with k as (select ?::uuid as workspace_id), ${rateLimitCte('true', true)}
  select hits, reset_in from rl`;

/**
 * RateLimit-* headers for a window with `hits` taken, or the 429 (`Retry-After` added) when
 * the rule's limit is exceeded.
 */
export function rateLimitHeaders(
  rule: RateLimitRule,
  hits: number,
  resetIn: number,
  /** The bucket, for `aisuite_rate_limited_requests_total{bucket}`. */
  bucket?: RateLimitBucket,
): Record<string, string> {
  const reset = Math.max(1, Math.ceil(resetIn));
  const headers: Record<string, string> = {
    'RateLimit-Policy': `${rule.limit};w=${rule.windowSeconds}`,
    'RateLimit-Limit': String(rule.limit),
    'RateLimit-Remaining': String(Math.max(0, rule.limit - hits)),
    'RateLimit-Reset': String(reset),
  };
  if (hits > rule.limit) {
    if (bucket) countRateLimited(bucket);
    throw appError('RATE_LIMITED', {
      headers: {
        ...headers,
        'Retry-After': String(reset),
      },
    });
  }
  return headers;
}

/** Takes one unit of the workspace's `bucket` (`Metering.rateLimit`): its RateLimit-* headers, or the 429. */
export async function rateLimit(
  db: () => SqlExecutor,
  rules: MeteringSettings['rateLimits'],
  workspaceId: string,
  bucket: RateLimitBucket,
): Promise<Record<string, string>> {
  const rule = rules[bucket];
  if (!rule || rule.limit <= 0) return {};
  const w = rule.windowSeconds;
  // One statement per request: a fixed window keyed by workspace and bucket, in the
  // database's clock, so every process shares the same counter — over the same rows as the
  // admission statements' (`rateLimitCte`) when the limit spreads it.
  const rows = shardedRateLimit(true, rule.limit)
    ? await db().execute<{ hits: number; reset_in: string | number }[]>(RATE_LIMIT_SHARDED, [
        workspaceId,
        ...rateLimitCteParams(`${bucket}:`, w, true, []),
      ])
    : await db().execute<{ hits: number; reset_in: string | number }[]>(RATE_LIMIT_UPSERT, [
        `${bucket}:${workspaceId}`,
        w,
        w,
        w,
      ]);
  const row = rows[0] as { hits: number; reset_in: string | number };
  return rateLimitHeaders(rule, Number(row.hits), Number(row.reset_in), bucket);
}
