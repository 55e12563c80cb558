import { ACTIVE_API_KEY_WHERE, API_KEY_FROM, LAST_USED_RESOLUTION_SECONDS } from '../auth/api-keys.js';
import { apiKeyPrincipal } from '../auth/principal.js';
import type { SqlExecutor } from '../db/sql.js';
import { AppError } from '../http/errors.js';
import type { LlmUsage, ModelInfo } from '../providers/llm.js';
import { estimateTokens } from '../providers/openai-provider.js';
import { cycleStart, nextCycleStart } from './cycle.js';
import type {
  GenerationInput,
  GenerationMeter as GenerationMeterContract,
  KeyAdmission,
  Metering,
  RateLimitBucket,
  UsageComponentLine,
  UsageRecordInput,
} from './types.js';

export const INSUFFICIENT_CREDITS = 'Insufficient credits. Please purchase additional credits to continue.';
export const TOKEN_LIMIT_EXCEEDED = 'Token limit exceeded';
export const RATE_LIMIT_EXCEEDED = 'Rate limit exceeded';

export const insufficientCredits = (message = INSUFFICIENT_CREDITS) =>
  new AppError(402, message, 'INSUFFICIENT_CREDITS');

export interface RateLimitRule {
  /** Requests per window; 0 turns the bucket off. */
  limit: number;
  windowSeconds: number;
}

export interface MeteringSettings {
  rateLimits: Record<RateLimitBucket, RateLimitRule>;
  /** Output tokens between two mid-generation credit checks. */
  creditCheckEveryTokens: number;
}

const int = (v: string | undefined, name: string, fallback: number): number => {
  if (v === undefined || v.trim() === '') return fallback;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer`);
  return n;
};

/** Metering settings from the environment (documented in docs/models-and-metering.md). */
export function meteringSettingsFromEnv(env: Record<string, string | undefined>): MeteringSettings {
  const windowSeconds = Math.max(1, int(env.RATE_LIMIT_WINDOW_SECONDS, 'RATE_LIMIT_WINDOW_SECONDS', 60));
  const rule = (name: string, fallback: number): RateLimitRule => ({
    limit: int(env[name], name, fallback),
    windowSeconds,
  });
  return {
    rateLimits: {
      chat: rule('RATE_LIMIT_CHAT', 60),
      session_create: rule('RATE_LIMIT_SESSION_CREATE', 30),
      agent_message: rule('RATE_LIMIT_AGENT_MESSAGE', 60),
      app_chat: rule('RATE_LIMIT_APP_CHAT', 120),
    },
    creditCheckEveryTokens: Math.max(
      1,
      int(env.METERING_CREDIT_CHECK_TOKENS, 'METERING_CREDIT_CHECK_TOKENS', 256),
    ),
  };
}

export interface TokenQuotaStatus {
  /** null: unlimited. */
  quota: number | null;
  used: number;
  cycleStart: Date;
  resetsAt: Date;
}

/**
 * The fixed-window counter as one upsert: `rows` yields `(key, window_start, 1)` (placeholders:
 * the key, then the window length twice via `RATE_LIMIT_WINDOW_START`), and the RETURNING
 * clause adds the hits and the seconds to the window's end (one more window-length placeholder).
 */
export const RATE_LIMIT_WINDOW_START = 'to_timestamp(floor(extract(epoch from now()) / ?) * ?)';
export const rateLimitUpsert = (
  rows: string,
) => `insert into rate_limit_windows as r (key, window_start, hits)
       ${rows}
       on conflict (key) do update set
         hits = case when r.window_start = excluded.window_start then r.hits + 1 else 1 end,
         window_start = excluded.window_start
       returning hits, extract(epoch from (window_start - now())) + ? as reset_in`;
const RATE_LIMIT_UPSERT = rateLimitUpsert(`values (?, ${RATE_LIMIT_WINDOW_START}, 1)`);

/**
 * RateLimit-* headers for a window with `hits` taken, or the 429 (`Retry-After` added) when
 * the rule's limit is exceeded.
 */
export function rateLimitHeaders(rule: RateLimitRule, hits: number, resetIn: number): Record<string, string> {
  const reset = Math.max(1, Math.ceil(resetIn));
  const headers: Record<string, string> = {
    'RateLimit-Policy': `${rule.limit};w=${rule.windowSeconds}`,
    'RateLimit-Limit': String(rule.limit),
    'RateLimit-Remaining': String(Math.max(0, rule.limit - hits)),
    'RateLimit-Reset': String(reset),
  };
  if (hits > rule.limit) {
    throw new AppError(429, RATE_LIMIT_EXCEEDED, 'RATE_LIMITED', undefined, {
      ...headers,
      'Retry-After': String(reset),
    });
  }
  return headers;
}

/** Joins `u.tokens, u.cycle_start`: the workspace's latest billing-cycle usage row, if any. */
const LATEST_CYCLE_USAGE = (workspaceId: string) => `left join lateral (
           select tokens, cycle_start from workspace_token_usage
            where workspace_id = ${workspaceId} order by cycle_start desc limit 1
         ) u on true`;

/** Tokens used in the billing cycle containing `now`, from the latest cycle row (or none). */
export function tokensUsedInCycle(
  start: Date,
  latest: { cycle_start: Date | string | null; tokens: string | number | null },
): number {
  return latest.cycle_start && new Date(latest.cycle_start).getTime() === start.getTime()
    ? Number(latest.tokens ?? 0)
    : 0;
}

/** Price of one line: quantity × unit price in micro-dollars, rounded up to a whole micro. */
const lineCost = (quantity: number, unitPriceMicros: number) => Math.ceil(quantity * unitPriceMicros - 1e-9);

/** A usage record as the set-based insert reads it (snake_case JSON). */
export interface UsageRow {
  workspace_id: string;
  api_key_id: string | null;
  app_id: string | null;
  thread_id: string | null;
  session_id: string | null;
  run_id: string | null;
  request_id: string;
  endpoint: string;
  model: string;
  meter: 'tokens' | 'credits';
  input_tokens: number;
  output_tokens: number;
  cost_micros: number;
  provider_status: string;
  latency_ms: number;
  component_lines: UsageComponentLine[];
  /** Set when the tokens count against the workspace's quota of that billing cycle. */
  cycle_start: string | null;
}

function usageRow(rec: UsageRecordInput, cycle: Date | null): UsageRow {
  return {
    workspace_id: rec.workspaceId,
    api_key_id: rec.apiKeyId ?? null,
    app_id: rec.appId ?? null,
    thread_id: rec.threadId ?? null,
    session_id: rec.sessionId ?? null,
    run_id: rec.runId ?? null,
    request_id: rec.requestId,
    endpoint: rec.endpoint,
    model: rec.model,
    meter: rec.meter,
    input_tokens: rec.inputTokens,
    output_tokens: rec.outputTokens,
    cost_micros: rec.costMicros,
    provider_status: rec.providerStatus,
    latency_ms: Math.max(0, Math.round(rec.latencyMs)),
    component_lines: rec.componentLines ?? [],
    cycle_start: cycle ? cycle.toISOString() : null,
  };
}

/**
 * Gathers usage records and writes them in one statement: when `maxRows` are pending, or
 * `delayMs` after the first one. Each `add` settles when its record is committed (a failed
 * batch is retried one record per statement; `add` rejects only if its own record fails). Off the response path: `/chat` writes
 * usage after the stream, so the delay costs no latency, and under load one statement per
 * batch replaces one per request.
 */
export class UsageBatcher {
  private pending: { row: UsageRow; resolve: () => void; reject: (err: unknown) => void }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly write: (rows: UsageRow[]) => Promise<void>,
    private readonly opts: { maxRows: number; delayMs: number } = { maxRows: 200, delayMs: 10 },
  ) {}

  add(row: UsageRow): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push({ row, resolve, reject });
      if (this.pending.length >= this.opts.maxRows) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), this.opts.delayMs);
    });
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    // A failed batch (say, one record of a workspace deleted meanwhile) is written again one
    // record per statement, so a bad record fails alone.
    const done = this.write(batch.map((b) => b.row))
      .then(
        () => {
          for (const b of batch) b.resolve();
        },
        () => Promise.all(batch.map((b) => this.write([b.row]).then(b.resolve, b.reject))).then(() => {}),
      )
      .finally(() => this.inFlight.delete(done));
    this.inFlight.add(done);
  }

  /** Writes what is pending and waits for every batch in flight. */
  async close(): Promise<void> {
    this.flush();
    await Promise.all([...this.inFlight]);
  }
}

/**
 * One metered generation. For the `credits` meter it works on a prepaid hold: `startGeneration`
 * takes the known input cost plus one chunk of output (`creditCheckEveryTokens` tokens) off the
 * balance in one conditional statement, `check()` tops the hold up by the next chunk the same
 * way while a long generation streams (402 when the balance cannot cover it), and `finish()`
 * settles: refunds what was held and not used, or debits the rest (clamped, reported `short`),
 * then writes one usage record. A generation that is never finished (process crash) keeps its
 * hold: the money stays taken, and the ledger shows the hold lines without a settlement.
 */
export class GenerationMeter implements GenerationMeterContract {
  inputTokens = 0;
  outputTokens = 0;
  images = 0;
  estimated = false;
  /** Output characters streamed and not yet covered by a reported usage. */
  private pendingChars = 0;
  private lastCheckTokens = 0;
  private finished = false;
  private readonly startedAt = Date.now();

  constructor(
    private readonly metering: PgMetering,
    readonly input: GenerationInput,
    /** Micro-dollars taken off the balance so far and not yet settled (credits meter). */
    private held = 0,
  ) {}

  /** What this generation holds (taken off the balance, not yet settled), in micro-dollars. */
  get heldMicros(): number {
    return this.held;
  }

  /** Adds the usage one model call reported (or estimated). */
  addUsage(usage: LlmUsage): void {
    this.inputTokens += usage.inputTokens;
    this.outputTokens += usage.outputTokens;
    this.pendingChars = 0;
    if (usage.estimated) this.estimated = true;
  }

  addImages(n = 1): void {
    this.images += n;
  }

  /**
   * Notes streamed output characters (before the call's usage is known). Returns true when a
   * credit re-check is due: call `check()` then.
   */
  addStreamedChars(chars: number): boolean {
    this.pendingChars += chars;
    return this.currentOutputTokens() - this.lastCheckTokens >= this.metering.settings.creditCheckEveryTokens;
  }

  private currentOutputTokens(): number {
    return this.outputTokens + estimateTokens(this.pendingChars);
  }

  /** Cost so far, in micro-dollars. */
  costMicros(): number {
    return this.metering.price(this.input.model, this.inputTokens, this.currentOutputTokens(), this.images)
      .costMicros;
  }

  /**
   * Mid-stream credit check (credits meter): makes sure the hold covers the cost so far plus
   * the next chunk of output, topping it up with one conditional statement when it does not
   * (no round trip when it already does). 402 when the balance cannot cover the top-up.
   */
  async check(): Promise<void> {
    this.lastCheckTokens = this.currentOutputTokens();
    if (this.input.meter !== 'credits' || this.finished) return;
    const need = this.costMicros() + this.metering.chunkMicros(this.input.model);
    if (need <= this.held) return;
    const topUp = need - this.held;
    const ok = await this.metering.hold(this.input.workspaceId, topUp, {
      reason: this.input.endpoint,
      ref: this.input.requestId,
    });
    if (!ok) throw insufficientCredits(this.input.insufficientMessage);
    this.held += topUp;
  }

  /**
   * Settles once (credits meter): refunds the unused part of the hold, or debits what the cost
   * exceeds it by (clamped to the balance and reported `short`), then writes the usage record.
   * Idempotent: a second call does nothing. Returns the cost and whether the balance fell short.
   */
  async finish(
    providerStatus: UsageRecordInput['providerStatus'],
  ): Promise<{ costMicros: number; short: boolean }> {
    if (this.finished) return { costMicros: 0, short: false };
    this.finished = true;
    const outputTokens = this.currentOutputTokens();
    const { costMicros, lines } = this.metering.price(
      this.input.model,
      this.inputTokens,
      outputTokens,
      this.images,
    );
    let short = false;
    if (this.input.meter === 'credits') {
      const ref = { reason: this.input.endpoint, ref: this.input.requestId };
      if (costMicros < this.held) {
        await this.metering.refund(this.input.workspaceId, this.held - costMicros, ref);
      } else if (costMicros > this.held) {
        const d = await this.metering.debit(this.input.workspaceId, costMicros - this.held, ref);
        short = d.short;
      }
      this.held = 0;
    }
    const { insufficientMessage: _m, model, ...rest } = this.input;
    await this.metering.record({
      ...rest,
      model: model.id,
      inputTokens: this.inputTokens,
      outputTokens,
      costMicros,
      providerStatus,
      latencyMs: Date.now() - this.startedAt,
      componentLines: lines,
    });
    return { costMicros, short };
  }
}

/**
 * The metering service on PostgreSQL (server or embedded): every balance change and counter
 * is one SQL statement, so any number of server processes sharing the database agree.
 */
export class PgMetering implements Metering {
  constructor(
    /** Where statements run: a fresh entity manager per call, or the plain pool (`using`). */
    private readonly db: () => SqlExecutor,
    readonly settings: MeteringSettings,
  ) {}

  /**
   * The same metering running its statements on `executor` (the `/chat` hot path's pool);
   * `batchUsage` gathers usage records into one statement per few milliseconds
   * (`UsageBatcher`). Call `close()` on it at shutdown to write what is pending.
   */
  using(executor: SqlExecutor, opts: { batchUsage?: boolean } = {}): PgMetering {
    const m = new PgMetering(() => executor, this.settings);
    if (opts.batchUsage) m.batcher = new UsageBatcher((rows) => m.writeUsage(rows));
    return m;
  }

  private batcher: UsageBatcher | undefined;

  /** Writes the pending batched usage records (no-op without batching). */
  async close(): Promise<void> {
    await this.batcher?.close();
  }

  // ---- token quota (/chat) -------------------------------------------------------------

  async tokenQuotaStatus(workspaceId: string, now = new Date()): Promise<TokenQuotaStatus> {
    const rows = await this.db().execute<
      {
        quota: string | null;
        anchor: Date | string;
        tokens: string | null;
        cycle_start: Date | string | null;
      }[]
    >(
      `select w.monthly_token_quota as quota, w.billing_cycle_anchor as anchor, u.tokens, u.cycle_start
         from workspaces w
         ${LATEST_CYCLE_USAGE('w.id')}
        where w.id = ?`,
      [workspaceId],
    );
    const row = rows[0];
    if (!row) throw new AppError(404, 'Workspace not found');
    const anchor = new Date(row.anchor);
    const start = cycleStart(anchor, now);
    return {
      quota: row.quota === null ? null : Number(row.quota),
      used: tokensUsedInCycle(start, row),
      cycleStart: start,
      resetsAt: nextCycleStart(anchor, now),
    };
  }

  async assertTokenQuota(workspaceId: string): Promise<void> {
    const s = await this.tokenQuotaStatus(workspaceId);
    if (s.quota !== null && s.used >= s.quota) throw new AppError(403, TOKEN_LIMIT_EXCEEDED);
  }

  // ---- credits -----------------------------------------------------------------------------

  async balanceMicros(workspaceId: string): Promise<number> {
    const rows = await this.db().execute<{ b: string }[]>(
      'select credit_balance_micros as b from workspaces where id = ?',
      [workspaceId],
    );
    if (!rows[0]) throw new AppError(404, 'Workspace not found');
    return Number(rows[0].b);
  }

  async assertCredits(workspaceId: string, atLeastMicros?: number, message?: string): Promise<void> {
    const balance = await this.balanceMicros(workspaceId);
    const need = atLeastMicros ?? 1;
    if (balance <= 0 || balance < need) throw insufficientCredits(message);
  }

  async debit(
    workspaceId: string,
    micros: number,
    ref: { reason: string; ref?: string },
  ): Promise<{ balanceMicros: number; short: boolean }> {
    if (!Number.isSafeInteger(micros) || micros < 0) throw new Error(`Invalid debit amount ${micros}`);
    // One statement: the UPDATE clamps the debit to what is left (SET expressions all read the
    // row as it was, so `last_debit_micros` is what was taken), and the ledger line is written
    // from its RETURNING. Concurrent debits serialise on the row lock; none can be lost.
    const rows = await this.db().execute<{ after: string; took: string }[]>(
      `with upd as (
         update workspaces set
           credit_balance_micros = credit_balance_micros - least(?::bigint, greatest(credit_balance_micros, 0)),
           last_debit_micros = least(?::bigint, greatest(credit_balance_micros, 0)),
           updated_at = now()
         where id = ?
         returning id, credit_balance_micros as after, last_debit_micros as took
       ), led as (
         insert into credit_ledger (id, workspace_id, amount_micros, balance_after_micros, kind, reason, ref)
         select gen_random_uuid(), upd.id, -upd.took, upd.after, 'debit', ?, ? from upd
       )
       select after, took from upd`,
      [micros, micros, workspaceId, ref.reason, ref.ref ?? null],
    );
    const row = rows[0];
    if (!row) throw new AppError(404, 'Workspace not found');
    return { balanceMicros: Number(row.after), short: Number(row.took) < micros };
  }

  /**
   * Takes `micros` off the balance only if the balance covers it: ONE conditional statement
   * (UPDATE … WHERE credit_balance_micros >= $hold, plus its ledger line `debit`). Concurrent
   * holds serialise on the row lock and each re-reads the balance the previous one left, so
   * the sum of granted holds never exceeds the balance. False when it does not cover it;
   * 404 when the workspace does not exist.
   */
  async hold(workspaceId: string, micros: number, ref: { reason: string; ref?: string }): Promise<boolean> {
    if (!Number.isSafeInteger(micros) || micros <= 0) throw new Error(`Invalid hold amount ${micros}`);
    const rows = await this.db().execute<{ after: string }[]>(
      `with upd as (
         update workspaces set credit_balance_micros = credit_balance_micros - ?::bigint, updated_at = now()
         where id = ? and credit_balance_micros >= ?::bigint
         returning id, credit_balance_micros as after
       ), led as (
         insert into credit_ledger (id, workspace_id, amount_micros, balance_after_micros, kind, reason, ref)
         select gen_random_uuid(), upd.id, -?::bigint, upd.after, 'debit', ?, ? from upd
       )
       select after from upd`,
      [micros, workspaceId, micros, micros, ref.reason, ref.ref ?? null],
    );
    if (rows[0]) return true;
    await this.balanceMicros(workspaceId); // 404 when the workspace does not exist
    return false;
  }

  /** Gives `micros` back (one statement, ledger line `refund`); returns the new balance. */
  async refund(
    workspaceId: string,
    micros: number,
    ref: { reason: string; ref?: string },
  ): Promise<{ balanceMicros: number }> {
    if (!Number.isSafeInteger(micros) || micros <= 0) throw new Error(`Invalid refund amount ${micros}`);
    const rows = await this.db().execute<{ after: string }[]>(
      `with upd as (
         update workspaces set credit_balance_micros = credit_balance_micros + ?::bigint, updated_at = now()
         where id = ?
         returning id, credit_balance_micros as after
       ), led as (
         insert into credit_ledger (id, workspace_id, amount_micros, balance_after_micros, kind, reason, ref)
         select gen_random_uuid(), upd.id, ?::bigint, upd.after, 'refund', ?, ? from upd
       )
       select after from upd`,
      [micros, workspaceId, micros, ref.reason, ref.ref ?? null],
    );
    if (!rows[0]) throw new AppError(404, 'Workspace not found');
    return { balanceMicros: Number(rows[0].after) };
  }

  /** Price of one chunk of output (`creditCheckEveryTokens` tokens), at least 1 µ$. */
  chunkMicros(model: ModelInfo): number {
    return Math.max(1, lineCost(this.settings.creditCheckEveryTokens, model.outputPricePerMTok));
  }

  price(
    model: ModelInfo,
    inputTokens: number,
    outputTokens: number,
    images = 0,
  ): { costMicros: number; lines: UsageComponentLine[] } {
    // USD per million tokens = micro-dollars per token.
    const lines: UsageComponentLine[] = [];
    if (inputTokens > 0 || images === 0) {
      lines.push({
        component: 'input_tokens',
        quantity: inputTokens,
        unitPriceMicros: model.inputPricePerMTok,
        costMicros: lineCost(inputTokens, model.inputPricePerMTok),
      });
    }
    if (outputTokens > 0 || images === 0) {
      lines.push({
        component: 'output_tokens',
        quantity: outputTokens,
        unitPriceMicros: model.outputPricePerMTok,
        costMicros: lineCost(outputTokens, model.outputPricePerMTok),
      });
    }
    if (images > 0) {
      const unit = Math.round((model.pricePerImage ?? 0) * 1_000_000);
      lines.push({ component: 'image', quantity: images, unitPriceMicros: unit, costMicros: images * unit });
    }
    return { costMicros: lines.reduce((s, l) => s + l.costMicros, 0), lines };
  }

  // ---- usage records -----------------------------------------------------------------------

  /**
   * Writes one usage record with its key's totals and the workspace's cycle tokens. On a
   * metering made with `using(pool, { batchUsage: true })` records are gathered for a few
   * milliseconds and written together; the promise settles when its batch is committed.
   */
  async record(rec: UsageRecordInput): Promise<void> {
    let cycle: Date | null = null;
    if (rec.meter === 'tokens' && rec.inputTokens + rec.outputTokens > 0) {
      cycle = rec.cycleStart ?? (await this.tokenQuotaStatus(rec.workspaceId)).cycleStart;
    }
    const row = usageRow(rec, cycle);
    if (this.batcher) return this.batcher.add(row);
    await this.writeUsage([row]);
  }

  /**
   * One statement for any number of records: the records, the keys' totals and the
   * workspaces' cycle tokens, aggregated per key and per workspace and cycle.
   */
  async writeUsage(rows: UsageRow[]): Promise<void> {
    await this.db().execute(
      `with input as (
         select * from jsonb_to_recordset(?::jsonb) as x(
           workspace_id uuid, api_key_id uuid, app_id text, thread_id text, session_id text, run_id text,
           request_id text, endpoint text, model text, meter text, input_tokens bigint, output_tokens bigint,
           cost_micros bigint, provider_status text, latency_ms integer, component_lines jsonb,
           cycle_start timestamptz)
       ), rec as (
         insert into usage_records (id, workspace_id, api_key_id, app_id, thread_id, session_id, run_id,
           request_id, endpoint, model, meter, input_tokens, output_tokens, cost_micros, provider_status,
           latency_ms, component_lines)
         select gen_random_uuid(), workspace_id, api_key_id, app_id, thread_id, session_id, run_id,
           request_id, endpoint, model, meter, input_tokens, output_tokens, cost_micros, provider_status,
           latency_ms, component_lines
           from input
       ), key as (
         update api_keys k set request_count = k.request_count + a.n, input_tokens = k.input_tokens + a.i,
           output_tokens = k.output_tokens + a.o, cost_micros = k.cost_micros + a.c
           from (select api_key_id, workspace_id, count(*) as n, sum(input_tokens) as i,
                        sum(output_tokens) as o, sum(cost_micros) as c
                   from input where api_key_id is not null group by api_key_id, workspace_id) a
          where k.id = a.api_key_id and k.workspace_id = a.workspace_id
       )
       insert into workspace_token_usage (workspace_id, cycle_start, tokens)
       select workspace_id, cycle_start, sum(input_tokens + output_tokens)
         from input where cycle_start is not null group by workspace_id, cycle_start
       on conflict (workspace_id, cycle_start)
       do update set tokens = workspace_token_usage.tokens + excluded.tokens, updated_at = now()`,
      [JSON.stringify(rows)],
    );
  }

  // ---- rate limits -------------------------------------------------------------------------

  async rateLimit(workspaceId: string, bucket: RateLimitBucket): Promise<Record<string, string>> {
    const rule = this.settings.rateLimits[bucket];
    if (!rule || rule.limit <= 0) return {};
    const w = rule.windowSeconds;
    // One statement per request: a fixed window keyed by workspace and bucket, in the
    // database's clock, so every process shares the same counter.
    const rows = await this.db().execute<{ hits: number; reset_in: string | number }[]>(RATE_LIMIT_UPSERT, [
      `${bucket}:${workspaceId}`,
      w,
      w,
      w,
    ]);
    const row = rows[0] as { hits: number; reset_in: string | number };
    return rateLimitHeaders(rule, Number(row.hits), Number(row.reset_in));
  }

  /**
   * The up-front checks of a token-metered API-key request (`POST /chat`) in ONE statement:
   * resolves the key (active key of an active workspace; refreshes `last_used_at` at most once
   * a minute), takes a unit from the workspace's rate-limit bucket when `admit` is set (an
   * invalid request spends none) and reads the token quota of the current billing cycle.
   * Undefined when the key does not resolve (401). Otherwise the caller checks, in this order,
   * its own 400s, then `limit()` (429) and `quota()` (403).
   */
  async admitKeyRequest(
    keyHash: string,
    bucket: RateLimitBucket,
    admit: boolean,
    now = new Date(),
  ): Promise<KeyAdmission | undefined> {
    const rule = this.settings.rateLimits[bucket];
    const limited = admit && !!rule && rule.limit > 0;
    const w = rule?.windowSeconds ?? 60;
    const rows = await this.db().execute<
      {
        id: string;
        name: string | null;
        workspace_id: string;
        workspace_name: string;
        quota: string | null;
        anchor: Date | string;
        hits: number | null;
        reset_in: string | number | null;
        tokens: string | null;
        cycle_start: Date | string | null;
      }[]
    >(
      `with async_commit as (select set_config('synchronous_commit', 'off', true) as v), k as (
         select k.id, k.name, k.workspace_id, w.name as workspace_name,
                w.monthly_token_quota as quota, w.billing_cycle_anchor as anchor
           from ${API_KEY_FROM} cross join async_commit
          where ${ACTIVE_API_KEY_WHERE}
       ), touch as (
         -- Never waits: a key row locked by a concurrent usage write is skipped this time.
         update api_keys set last_used_at = now()
          where id in (
            select a.id from api_keys a join k on k.id = a.id
             where a.last_used_at is null
                or a.last_used_at < now() - interval '${LAST_USED_RESOLUTION_SECONDS} seconds'
               for update of a skip locked)
       ), rl as (
         ${rateLimitUpsert(`select ? || k.workspace_id::text, ${RATE_LIMIT_WINDOW_START}, 1 from k where ?::boolean`)}
       )
       select k.*, rl.hits, rl.reset_in, u.tokens, u.cycle_start
         from k
         left join rl on true
         ${LATEST_CYCLE_USAGE('k.workspace_id')}`,
      [keyHash, `${bucket}:`, w, w, limited, w],
    );
    const row = rows[0];
    if (!row) return undefined;
    const start = cycleStart(new Date(row.anchor), now);
    return {
      principal: apiKeyPrincipal(row),
      cycleStart: start,
      limit: () => (limited && rule ? rateLimitHeaders(rule, Number(row.hits), Number(row.reset_in)) : {}),
      quota: () => {
        if (row.quota !== null && tokensUsedInCycle(start, row) >= Number(row.quota)) {
          throw new AppError(403, TOKEN_LIMIT_EXCEEDED);
        }
      },
    };
  }

  // ---- generations ---------------------------------------------------------------------------

  /**
   * Starts a metered generation. Credits meter: takes the hold (the known input cost, from
   * `inputTokens`, plus one chunk of output; at least `minimumMicros` and 1 µ$) in one
   * conditional statement, 402 with the caller's message when the balance cannot cover it.
   * Tokens meter: 403 when the quota is spent. Then a `GenerationMeter` to feed and finish
   * (always `finish` in `finally`: an unfinished generation keeps its hold).
   */
  async startGeneration(
    input: GenerationInput,
    opts: { minimumMicros?: number; inputTokens?: number } = {},
  ): Promise<GenerationMeter> {
    if (input.meter !== 'credits') {
      await this.assertTokenQuota(input.workspaceId);
      return new GenerationMeter(this, input);
    }
    const known = (n: number | undefined) =>
      n !== undefined && Number.isFinite(n) && n > 0 ? Math.ceil(n) : 0;
    const inputCost = lineCost(known(opts.inputTokens), input.model.inputPricePerMTok);
    const held = Math.max(1, known(opts.minimumMicros), inputCost + this.chunkMicros(input.model));
    const ok = await this.hold(input.workspaceId, held, { reason: input.endpoint, ref: input.requestId });
    if (!ok) throw insufficientCredits(input.insufficientMessage);
    return new GenerationMeter(this, input, held);
  }
}
