import { TOUCH_API_KEY_CTE } from '../auth/api-keys.js';
import type { SqlExecutor } from '../db/sql.js';
import { type AdmissionRow, admissionOf, admitKeyRequest, reserveQuota } from './admission.js';
import { CYCLE_START_SQL } from './cycle.js';
import {
  RATE_LIMIT_SHARDS,
  RATE_LIMIT_WINDOW_START,
  rateLimitUpsert,
  shardedRateLimit,
  shardSuffix,
} from './rate-limit.js';
import type { MeteringSettings } from './settings.js';
import type { KeyAdmission, RateLimitBucket } from './types.js';

/** Admissions one batch statement takes at most (`METERING_ADMISSION_BATCH`'s default). */
export const ADMISSION_BATCH_MAX = 64;

/**
 * Admission statements of a bucket in flight at once: with one, a request that arrives while it
 * runs waits for it and then for its own; with two, batches form as well and the wait is
 * shorter; with four, the statements took each other's row locks (bench/chat-overhead, c=50:
 * 0.87, 0.91–0.94 and 0.77× direct for one, two and four).
 */
export const ADMISSION_STATEMENTS_IN_FLIGHT = 2;

interface Pending {
  keyHash: string;
  admit: boolean;
  reserveTokens: number;
  resolve: (a: KeyAdmission | undefined) => void;
  reject: (err: unknown) => void;
}

interface Queue {
  pending: Pending[];
  inFlight: number;
}

type BatchRow = AdmissionRow & { i: number };

/**
 * The admission statement of `admitKeyRequest` for several requests of one bucket at once,
 * without the quota reservation: resolves each key, refreshes `last_used_at` as it does, and
 * takes the rate-limit units of each workspace's admitted requests with ONE upsert of the
 * window's row (`hits + n`; the other shards summed as `rateLimitCte` does). Each request's
 * count is the one it would have seen had the requests run one after another in batch order:
 * the window's count before the batch plus its rank among its workspace's admitted requests.
 * Parameters: `batchParams`.
 */
const batchSql = (
  sharded: boolean,
) => `with async_commit as (select set_config('synchronous_commit', 'off', true) as v),
     req as (select * from jsonb_to_recordset(?::jsonb) as r(i int, key_hash text, admit boolean)),
     k as (
         select req.i, req.admit, k.id, k.name, k.workspace_id, w.name as workspace_name,
                w.monthly_token_quota as quota, ${CYCLE_START_SQL('w.billing_cycle_anchor')} as cs
           from req join api_keys k on k.key_hash = req.key_hash
           join workspaces w on w.id = k.workspace_id
          cross join async_commit
          where k.revoked_at is null and w.status = 'active'
       ), ${TOUCH_API_KEY_CTE},
     n as (
         select workspace_id, ? || workspace_id::text || ? as key, count(*)::int as n
           from k where admit and ?::boolean group by workspace_id
       ), rl_own as (
         ${rateLimitUpsert(`select n.key, ${RATE_LIMIT_WINDOW_START}, n.n from n`, 'key, window_start, hits')}
       ), rl as (
         select n.workspace_id, n.n, o.reset_in, (o.hits${
           sharded
             ? ` + coalesce((
                  select sum(x.hits) from rate_limit_windows x
                   where x.window_start = o.window_start and x.key <> o.key
                     and x.key in (select ? || n.workspace_id::text || ':s' || g from generate_series(0, ?::int) g)
                ), 0)`
             : ''
         })::int as hits
           from n join rl_own o on o.key = n.key
       )
     select k.i, k.id, k.name, k.workspace_id, k.workspace_name, k.quota, k.cs, rl.reset_in,
            case when k.admit and rl.hits is not null
                 then rl.hits - rl.n + (row_number() over (partition by k.workspace_id, k.admit order by k.i))::int
            end as hits
       from k left join rl on rl.workspace_id = k.workspace_id`;

const batchParams = (
  entries: { keyHash: string; admit: boolean }[],
  prefix: string,
  windowSeconds: number,
  sharded: boolean,
  limited: boolean,
): unknown[] => [
  JSON.stringify(entries.map((e, i) => ({ i, key_hash: e.keyHash, admit: e.admit }))),
  prefix,
  sharded ? shardSuffix() : '',
  limited,
  windowSeconds,
  windowSeconds,
  windowSeconds,
  ...(sharded ? [prefix, RATE_LIMIT_SHARDS - 1] : []),
];

/**
 * Natural batching of the `/chat` key admissions of this process (decision 0053): while
 * `ADMISSION_STATEMENTS_IN_FLIGHT` admission statements of a bucket are in flight, the requests
 * that arrive wait for one to end and then go together in one statement (at most `max`). A
 * lone request runs `admitKeyRequest`'s statement at once, as without batching, so a quiet
 * server adds no delay; under load the database runs one statement for many requests instead
 * of one each.
 *
 * Every guarantee of the one-request statement holds: the key resolves as it does, the rate
 * limit counts exactly (each request sees the count it would have seen in batch order), and a
 * request of a workspace with a token quota, admitted and within the limit, reserves its
 * tokens with `reserveQuota`'s conditional upsert (one statement each, as concurrent
 * admissions already did).
 */
export class AdmissionBatcher {
  private readonly queues = new Map<RateLimitBucket, Queue>();

  constructor(
    private readonly db: () => SqlExecutor,
    private readonly rules: MeteringSettings['rateLimits'],
    private readonly max = ADMISSION_BATCH_MAX,
    /** Statements of a bucket in flight at once. */
    private readonly parallel = ADMISSION_STATEMENTS_IN_FLIGHT,
  ) {}

  admit(
    keyHash: string,
    bucket: RateLimitBucket,
    admit: boolean,
    reserveTokens: number,
  ): Promise<KeyAdmission | undefined> {
    let q = this.queues.get(bucket);
    if (!q) {
      q = { pending: [], inFlight: 0 };
      this.queues.set(bucket, q);
    }
    const queue = q;
    return new Promise((resolve, reject) => {
      queue.pending.push({ keyHash, admit, reserveTokens, resolve, reject });
      if (queue.inFlight < this.parallel) this.next(bucket, queue);
    });
  }

  private next(bucket: RateLimitBucket, q: Queue): void {
    const batch = q.pending.splice(0, this.max);
    if (batch.length === 0) return;
    q.inFlight++;
    const run =
      batch.length === 1
        ? this.one(bucket, batch[0] as Pending)
        : // A failed batch statement changed nothing (one statement commits whole or not at all):
          // each request is admitted again on its own, so one request's failure stays its own.
          this.many(bucket, batch).catch(() => Promise.all(batch.map((p) => this.one(bucket, p))));
    void run.finally(() => {
      q.inFlight--;
      this.next(bucket, q);
    });
  }

  private one(bucket: RateLimitBucket, p: Pending): Promise<void> {
    return admitKeyRequest(this.db, this.rules, p.keyHash, bucket, p.admit, p.reserveTokens).then(
      p.resolve,
      p.reject,
    );
  }

  /** The batch statement; the quota reservations it leads to go on without holding the queue. */
  private async many(bucket: RateLimitBucket, batch: Pending[]): Promise<void> {
    const rule = this.rules[bucket];
    const limited = !!rule && rule.limit > 0;
    const w = rule?.windowSeconds ?? 60;
    const sharded = shardedRateLimit(limited, rule?.limit ?? 0);
    const rows = await this.db().execute<BatchRow[]>(
      batchSql(sharded),
      batchParams(batch, `${bucket}:`, w, sharded, limited),
    );
    const byIndex = new Map(rows.map((r) => [Number(r.i), r]));
    for (const [i, p] of batch.entries()) {
      const row = byIndex.get(i);
      if (!row) {
        p.resolve(undefined);
        continue;
      }
      const within = !limited || !rule || Number(row.hits) <= rule.limit;
      if (row.quota === null || Number(row.quota) <= 0 || !p.admit || !within) {
        p.resolve(admissionOf(row, { limited: limited && p.admit, rule, bucket, reservationId: null }));
        continue;
      }
      reserveQuota(this.db, row.workspace_id, p.reserveTokens).then(
        (r) =>
          p.resolve(
            admissionOf(
              { ...row, quota: r.quota === null ? null : String(r.quota), cs: r.cycleStart },
              { limited, rule, bucket, reservationId: r.reservationId },
            ),
          ),
        p.reject,
      );
    }
  }
}
