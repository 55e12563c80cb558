import type { Principal } from '../auth/principal.js';
import type { SqlExecutor } from '../db/sql.js';
import type { LlmUsage, ModelInfo } from '../providers/llm.js';
import type { FirstReplyGate } from './first-reply.js';

/**
 * The metering contract every capability calls around model and image work (spec 1.11, 7, 8).
 * Money is integer micro-dollars.
 */

export type RateLimitBucket = 'chat' | 'session_create' | 'agent_message' | 'app_chat';

export interface UsageComponentLine {
  component: string; // e.g. 'input_tokens', 'output_tokens', 'image'
  quantity: number;
  unitPriceMicros: number;
  costMicros: number;
}

export interface UsageRecordInput {
  workspaceId: string;
  apiKeyId?: string | null;
  appId?: string | null;
  threadId?: string | null;
  sessionId?: string | null;
  runId?: string | null;
  requestId: string;
  endpoint: string; // e.g. '/chat', '/managed-agents/sessions/{id}/messages'
  model: string;
  inputTokens: number;
  outputTokens: number;
  costMicros: number;
  providerStatus: 'success' | 'error' | 'aborted' | string;
  latencyMs: number;
  componentLines?: UsageComponentLine[];
  /** Which meter: `tokens` (the /chat quota) or `credits` (everything else). */
  meter: 'tokens' | 'credits';
  /** The billing cycle the tokens count in, when the caller already knows it (saves a query). */
  cycleStart?: Date;
  /** The `/chat` quota reservation (from `admitKeyRequest`) this record releases. */
  reservationId?: string | null;
}

export interface Metering {
  /** 403 `Token limit exceeded` when the workspace's monthly /chat quota is spent. */
  assertTokenQuota(workspaceId: string): Promise<void>;
  /** 402 INSUFFICIENT_CREDITS when the balance cannot cover `atLeastMicros` (default: > 0). */
  assertCredits(workspaceId: string, atLeastMicros?: number, variant?: 'appsChat'): Promise<void>;
  /**
   * Atomically debits `micros` (one statement); returns the new balance. A debit that would
   * take the balance below zero is clamped to what is left and reported as `short`.
   */
  debit(
    workspaceId: string,
    micros: number,
    ref: { reason: string; ref?: string },
  ): Promise<{ balanceMicros: number; short: boolean }>;
  /** Price of a model call in micro-dollars, with its component lines. */
  price(
    model: ModelInfo,
    inputTokens: number,
    outputTokens: number,
    images?: number,
  ): {
    costMicros: number;
    lines: UsageComponentLine[];
  };
  /** Writes the usage record and updates per-key and per-workspace token totals. */
  record(rec: UsageRecordInput): Promise<void>;
  /**
   * Takes one unit from the workspace's bucket; throws 429 `Rate limit exceeded` with
   * `Retry-After` and `RateLimit-*` headers (AppError.headers) when empty. Returns the headers
   * to set on a successful response too.
   */
  rateLimit(workspaceId: string, bucket: RateLimitBucket): Promise<Record<string, string>>;

  /**
   * Key lookup + rate limit + token quota of an API-key request in one statement (the
   * `/chat` hot path); undefined when the key does not resolve.
   */
  admitKeyRequest(
    keyHash: string,
    bucket: RateLimitBucket,
    admit: boolean,
    reserveTokens?: number,
  ): Promise<KeyAdmission | undefined>;
  /** A `/chat` quota reservation on its own (the session-authenticated path); null id = quota spent. */
  reserveQuota(
    workspaceId: string,
    reserveTokens: number,
  ): Promise<{ quota: number | null; cycleStart: Date; reservationId: string | null }>;
  /** The rate-limit rules (for statements that take a unit themselves, like app chat's admission). */
  readonly settings: { rateLimits: Record<RateLimitBucket, { limit: number; windowSeconds: number }> };
  /** Expected reply lengths per model and endpoint (`estimatorKey`): sizes holds and quota reservations. */
  readonly estimator: {
    expect(key: string, maxTokens?: number): number;
    observe(key: string, outputTokens: number): void;
    observeInput(key: string, estimated: number, reported: number): void;
    inputFactor(key: string): number;
    /** The first reply of a key: requests that come while it is in flight wait for it (`FirstReplyGate`). */
    readonly firstReplies: FirstReplyGate;
  };
  /**
   * Settles the credit holds of dead processes (lease expired) and drops expired `/chat`
   * quota reservations; the run engine's sweep calls it.
   */
  settleExpired(): Promise<number>;
  /** The same metering on another executor (the plain pool of `db/sql.ts`), usage and key admissions batched or not. */
  using(executor: SqlExecutor, opts?: { batchUsage?: boolean; batchAdmissions?: boolean }): Metering;
  /** Writes pending batched usage records (shutdown). */
  close(): Promise<void>;
  /** Current balance in micro-dollars. */
  balanceMicros(workspaceId: string): Promise<number>;
  /** The workspace's /chat token quota, usage in the current billing cycle and next reset. */
  tokenQuotaStatus(
    workspaceId: string,
  ): Promise<{ quota: number | null; used: number; cycleStart: Date; resetsAt: Date }>;
  /**
   * Starts one metered generation. `credits` meter: atomically takes a prepaid hold (input
   * cost from `opts.inputTokens` (or `opts.expectedInputTokens`: held, not recorded if the
   * call fails) plus the expected reply: learned per model, capped by `opts.maxTokens`; plus
   * an image model's price per image; at least `opts.minimumMicros` and 1 µ$), 402 `INSUFFICIENT_CREDITS`
   * when the balance cannot cover it. `tokens` meter: 403 `Token limit exceeded`. Then
   * accumulates usage, tops the hold up mid-stream (`check`) and settles + records usage on
   * `finish`.
   */
  startGeneration(
    input: GenerationInput,
    opts?: {
      minimumMicros?: number;
      inputTokens?: number;
      expectedInputTokens?: number;
      maxTokens?: number;
      extraMicros?: number;
      prepaidMicros?: number;
      /** The hold commits without waiting for the WAL flush (`GenerationOptions.asyncCommit`). */
      asyncCommit?: boolean;
    },
  ): Promise<GenerationMeter>;
  /** The hold `startGeneration` would take for such a call (sizes a companion hold's `extraMicros`). */
  expectedHoldMicros(model: ModelInfo, endpoint: string, inputTokens: number): number;
  /**
   * `startGeneration`'s credit hold as CTEs of the caller's own statement (app chat takes it
   * in its admission: one statement before the first token). See `StatementHold`.
   */
  holdInStatement(
    input: Omit<GenerationInput, 'workspaceId' | 'apiKeyId' | 'sessionId'>,
    opts: { inputChars: number; maxTokens?: number },
  ): StatementHold;
}

/**
 * A credit hold taken inside the caller's statement. The caller's WITH defines, before
 * `ctes`, a CTE `hold_src (workspace_id uuid, extra_chars bigint, usage_patch jsonb)` with one
 * row when the hold is to be taken (none otherwise: nothing is held or written); `ctes` add
 * `hold_amt` (the amount, computed like `startGeneration`'s from `inputChars + extra_chars`
 * prompt characters at ~4 a token) and `hold_upd` (the conditional balance update; its row,
 * `held`, only when the balance covered it), then the ledger line and the `credit_holds` row
 * (`usage_patch` completes the usage record a sweep would write: `workspaceId`, `apiKeyId`,
 * `sessionId`). `params` follow the caller's params up to `hold_src`, in text order.
 */
export interface StatementHold {
  ctes: string;
  params: unknown[];
  /** The meter of the hold the statement took (`heldMicros`: its `hold_upd.held`). */
  adopt(input: GenerationInput, heldMicros: number, inputTokens: number): GenerationMeter;
}

/**
 * `finish` (credits meter) as CTEs of the caller's statement, so the settlement, its usage
 * record and the caller's writes are one transaction. `ctes` go FIRST in the caller's WITH:
 * the hold row is deleted, then the workspace's balance row written by one UPDATE; `stl_done`
 * has one row once it is (the caller's own writes should select from it so they lock after
 * it), `stl_amt` has a row when the hold was still there (then the refund or debit, its
 * ledger line, the usage record and the key's totals are written). The caller selects
 * `columns` and hands its row to `committed`; if the statement failed it calls `failed` (the
 * meter can then be finished on its own).
 */
export interface StatementSettlement {
  ctes: string;
  params: unknown[];
  columns: string;
  committed(row: { stl_delta: unknown; stl_change: unknown }): { costMicros: number; short: boolean };
  failed(): void;
}

export type GenerationInput = Omit<
  UsageRecordInput,
  'inputTokens' | 'outputTokens' | 'costMicros' | 'providerStatus' | 'latencyMs' | 'componentLines' | 'model'
> & {
  model: ModelInfo;
  /** Wording of the 402 (apps chat says `Insufficient credits`); default the spec's long one. */
  insufficientVariant?: 'appsChat';
};

/**
 * One generation's meter. Typical use in a streaming capability:
 *
 *   const meter = await deps.metering.startGeneration({ workspaceId, endpoint, model, requestId, meter: 'credits' });
 *   for each text delta: if (meter.addStreamedChars(text.length)) await meter.check(); // 402 mid-stream
 *   after each model call: meter.addUsage(usage);
 *   at the end, in `finally` (also on error/abort): await meter.finish('success' | 'error' | 'aborted');
 *
 * Credits meter: `startGeneration` holds the input cost plus the expected reply, `check()`
 * tops the hold up by the next chunk (within one hold's worth below zero; 402 past that) and
 * `finish()` refunds the unused hold or debits the rest. A meter never finished (its process
 * died) is settled by the run engine's sweep once its lease expires.
 */
export interface GenerationMeter {
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** Adds what one model call reported (replaces the streamed-characters and input estimates). */
  addUsage(usage: LlmUsage): void;
  /** Notes another model call about to send `inputTokens` (estimated) upstream. */
  beginCall(inputTokens: number): void;
  addImages(n?: number): void;
  /** Notes streamed output characters; true when a credit re-check is due. */
  addStreamedChars(chars: number): boolean;
  /** Tops the credit hold up to the cost so far plus the next chunk; 402 when the balance cannot. */
  check(): Promise<void>;
  costMicros(): number;
  /** Gives the hold back whole, no usage record (abandoned before anything was sent). */
  release(): Promise<void>;
  /**
   * `finish` as part of the caller's statement (see `StatementSettlement`); undefined when
   * that cannot be (tokens meter, no hold, finished already): call `finish` then.
   */
  settlementInStatement(providerStatus: UsageRecordInput['providerStatus']): StatementSettlement | undefined;
  /**
   * Settles the hold once (credits meter: refund the unused part, or debit the rest, clamped
   * and reported `short`) and writes the usage record; idempotent.
   */
  finish(providerStatus: UsageRecordInput['providerStatus']): Promise<{ costMicros: number; short: boolean }>;
}

/** What `admitKeyRequest` found: the caller, the billing cycle and the deferred verdicts. */
export interface KeyAdmission {
  principal: Principal;
  /** Billing cycle of the token quota (pass it to `record` as `cycleStart`). */
  cycleStart: Date;
  /** The quota reservation taken (pass it to `record`), null when none was (no quota, refused). */
  reservationId: string | null;
  /** RateLimit-* headers, or throws the 429. */
  limit(): Record<string, string>;
  /** Throws 403 `Token limit exceeded` when the cycle's quota is spent. */
  quota(): void;
}
