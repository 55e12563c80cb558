import type { LlmUsage, ModelInfo } from '../providers/llm.js';
import { estimateTokens } from '../providers/tokens.js';
import { countCreditsDebited } from '../telemetry/metrics.js';
import { insufficientCredits } from './credits.js';
import { estimatorKey, type OutputEstimator } from './estimator.js';
import { holdCheck } from './hold-check.js';
import type { HoldLeases } from './holds.js';
import type { MeteringSettings } from './settings.js';
import { SETTLE_CTES, settledShort, settleParams } from './settlement.js';
import type {
  GenerationInput,
  GenerationMeter as GenerationMeterContract,
  Metering,
  StatementSettlement,
  UsageRecordInput,
} from './types.js';

/**
 * What a meter uses of the metering that started it (`PgMetering`): its settings, estimator
 * and hold leases, pricing, the hold's top-ups and settlement, and the usage record.
 */
export interface MeterHost extends Pick<Metering, 'price' | 'record'> {
  readonly settings: Pick<MeteringSettings, 'creditCheckEveryTokens'>;
  readonly estimator: OutputEstimator;
  readonly leases: HoldLeases;
  /** Price of one chunk of output (`creditCheckEveryTokens` tokens), at least 1 µ$. */
  chunkMicros(model: ModelInfo): number;
  /** Tops hold `holdId` up by `micros` (`credits.ts` `topUp`); false when the balance cannot. */
  topUp(
    workspaceId: string,
    holdId: string,
    micros: number,
    overdraftMicros: number,
    ref: { reason: string; ref?: string; usedMicros: number; inputTokens: number; outputTokens: number },
  ): Promise<boolean>;
  /** Settles hold `holdId` against its cost (`settlement.ts` `settle`); undefined when it is gone. */
  settle(
    workspaceId: string,
    holdId: string,
    costMicros: number,
    overdraftMicros: number,
    ref: { reason: string; ref?: string },
  ): Promise<{ short: boolean } | undefined>;
}

/**
 * One metered generation. For the `credits` meter it works on a prepaid hold (a
 * `credit_holds` row): `startGeneration` takes the known input cost plus the expected reply
 * (learned per model, capped by `maxTokens`) off the balance in one conditional statement,
 * `check()` tops the hold up chunk by chunk while a reply outgrows it, drawing at most one
 * hold's worth below zero when the balance is spent (so a started reply finishes rather than
 * being thrown away; 402 past that), and `finish()` settles: refunds what was held and not
 * used, or debits the rest, then writes one usage record. A hold whose process died is
 * settled by the run engine's sweep once its lease expires (`PgMetering.settleExpired`).
 */
export class GenerationMeter implements GenerationMeterContract {
  inputTokens = 0;
  outputTokens = 0;
  images = 0;
  estimated = false;
  /** Input tokens sent (estimated, corrected) by a call whose usage has not been reported yet. */
  private pendingInputTokens = 0;
  /** The same before the correction (~4 characters per token), to learn the correction. */
  private pendingRawInput = 0;
  /** Output characters streamed and not yet covered by a reported usage. */
  private pendingChars = 0;
  private lastCheckTokens = 0;
  private finished = false;
  private readonly startedAt = Date.now();

  constructor(
    private readonly metering: MeterHost,
    readonly input: GenerationInput,
    /** Micro-dollars taken off the balance so far and not yet settled (credits meter). */
    private held = 0,
    /** The `credit_holds` row (credits meter). */
    readonly holdId: string | null = null,
    rawInputTokens = 0,
    /** How far below zero a top-up may take the balance (one hold's worth). */
    private readonly overdraftMicros = 0,
    /** Reported / estimated input tokens, as learned for this model and endpoint. */
    private readonly inputFactor = 1,
  ) {
    this.beginCall(rawInputTokens);
    // Kept alive, its progress marked, while this process runs (`HoldLeases`).
    if (holdId && input.meter === 'credits') metering.leases.add(holdId, () => this.progress());
  }

  /** What the generation has used so far (the progress mark a crash is settled from). */
  progress(): { usedMicros: number; inputTokens: number; outputTokens: number } {
    return {
      usedMicros: this.costMicros(),
      inputTokens: this.currentInputTokens(),
      outputTokens: this.currentOutputTokens(),
    };
  }

  private get key(): string {
    return estimatorKey(this.input.model.id, this.input.endpoint);
  }

  /** What this generation holds (taken off the balance, not yet settled), in micro-dollars. */
  get heldMicros(): number {
    return this.held;
  }

  /** Input tokens (estimated, uncorrected) held but not recorded: learns the ratio on the first report. */
  private expectedRawInput = 0;

  /** Notes input tokens expected (held) but not to be recorded if no usage comes back. */
  expectInput(rawTokens: number): void {
    if (Number.isFinite(rawTokens) && rawTokens > 0) this.expectedRawInput = Math.ceil(rawTokens);
  }

  /** Notes a further model call about to send `inputTokens` (estimated) upstream. */
  beginCall(inputTokens: number): void {
    if (!Number.isFinite(inputTokens) || inputTokens <= 0) return;
    this.pendingRawInput += Math.ceil(inputTokens);
    this.pendingInputTokens += Math.ceil(inputTokens * this.inputFactor);
  }

  /** Adds the usage one model call reported (or estimated). */
  addUsage(usage: LlmUsage): void {
    const raw = this.pendingRawInput > 0 ? this.pendingRawInput : this.expectedRawInput;
    if (!usage.estimated && raw > 0) this.metering.estimator.observeInput(this.key, raw, usage.inputTokens);
    this.pendingRawInput = 0;
    this.expectedRawInput = 0;
    this.inputTokens += usage.inputTokens;
    this.outputTokens += usage.outputTokens;
    this.pendingChars = 0;
    this.pendingInputTokens = 0;
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
    const tokens = this.currentOutputTokens();
    return (
      tokens - this.lastCheckTokens >= this.metering.settings.creditCheckEveryTokens ||
      tokens >= this.checkAtTokens
    );
  }

  private currentOutputTokens(): number {
    return this.outputTokens + estimateTokens(this.pendingChars);
  }

  /** Input tokens so far: reported, plus the estimate of a call not reported yet. */
  private currentInputTokens(): number {
    return this.inputTokens + this.pendingInputTokens;
  }

  /** Cost so far, in micro-dollars. */
  costMicros(): number {
    return this.metering.price(
      this.input.model,
      this.currentInputTokens(),
      this.currentOutputTokens(),
      this.images,
    ).costMicros;
  }

  /**
   * Mid-stream credit check (credits meter), `holdCheck` (metering/hold-check.ts): the hold
   * is topped up to the cost so far plus the next chunk when it does not cover that; when the
   * balance cannot (other requests hold it), the reply goes on within what this hold covers and
   * the next check comes as it runs out; only a reply that outgrows its hold when even the
   * overdraft cannot top it up is refused (402).
   */
  async check(): Promise<void> {
    this.lastCheckTokens = this.currentOutputTokens();
    if (this.input.meter !== 'credits' || this.finished || !this.holdId) return;
    const holdId = this.holdId;
    const r = await holdCheck({
      held: this.held,
      costMicros: this.costMicros(),
      chunkMicros: this.metering.chunkMicros(this.input.model),
      outputTokens: this.currentOutputTokens(),
      outputPricePerMTok: this.input.model.outputPricePerMTok,
      topUp: (micros, usedMicros, overdraft) =>
        this.metering.topUp(this.input.workspaceId, holdId, micros, overdraft ? this.overdraftMicros : 0, {
          reason: this.input.endpoint,
          ref: this.input.requestId,
          usedMicros,
          inputTokens: this.currentInputTokens(),
          outputTokens: this.currentOutputTokens(),
        }),
    });
    if (r.refused) throw insufficientCredits(this.input.insufficientVariant);
    this.held = r.held;
    this.checkAtTokens = r.checkAtTokens;
  }

  /** Output tokens at which the next check is due however few streamed since the last (hold running out). */
  private checkAtTokens = Number.POSITIVE_INFINITY;

  /**
   * Gives the whole hold back without a usage record: for a generation abandoned before
   * anything was sent upstream. Idempotent, and a no-op after `finish`.
   */
  async release(): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    if (this.input.meter !== 'credits' || !this.holdId) return;
    this.metering.leases.delete(this.holdId);
    await this.metering.settle(this.input.workspaceId, this.holdId, 0, 0, {
      reason: this.input.endpoint,
      ref: this.input.requestId,
    });
    this.held = 0;
  }

  /**
   * Settles once (credits meter): refunds the unused part of the hold, or debits what the cost
   * exceeds it by (at most one hold's worth below zero; beyond that reported `short`), then
   * writes the usage record, whose input tokens are the reported ones or, for a call that
   * reported none (ended early), the estimate of what was sent. Idempotent. A hold already
   * settled by the sweep (this process lost its lease) is neither settled nor recorded again.
   */
  async finish(
    providerStatus: UsageRecordInput['providerStatus'],
  ): Promise<{ costMicros: number; short: boolean }> {
    if (this.finished) return { costMicros: 0, short: false };
    this.finished = true;
    if (this.pendingInputTokens > 0) this.estimated = true;
    const inputTokens = this.currentInputTokens();
    const outputTokens = this.currentOutputTokens();
    const { costMicros, lines } = this.metering.price(
      this.input.model,
      inputTokens,
      outputTokens,
      this.images,
    );
    let short = false;
    if (this.input.meter === 'credits' && this.holdId) {
      this.metering.leases.delete(this.holdId);
      const settled = await this.metering.settle(
        this.input.workspaceId,
        this.holdId,
        costMicros,
        this.overdraftMicros,
        {
          reason: this.input.endpoint,
          ref: this.input.requestId,
        },
      );
      this.held = 0;
      if (!settled) return { costMicros, short: false };
      short = settled.short;
    }
    // Image models learn their output tokens too (gpt-image reports them; others report 0).
    if (providerStatus === 'success') this.metering.estimator.observe(this.key, outputTokens);
    const { insufficientVariant: _m, model, ...rest } = this.input;
    await this.metering.record({
      ...rest,
      model: model.id,
      inputTokens,
      outputTokens,
      costMicros,
      providerStatus,
      latencyMs: Date.now() - this.startedAt,
      componentLines: lines,
    });
    return { costMicros, short };
  }

  /**
   * `finish` as CTEs of the caller's statement (`StatementSettlement`): the settlement of
   * `settle` and the usage record with its key's totals (what `writeUsage` does for a credits
   * record; no cycle tokens), written only when the hold is still there. The meter counts as
   * finished from here; `failed()` undoes that.
   */
  settlementInStatement(providerStatus: UsageRecordInput['providerStatus']): StatementSettlement | undefined {
    if (this.finished || this.input.meter !== 'credits' || !this.holdId) return undefined;
    const holdId = this.holdId;
    this.finished = true;
    this.metering.leases.delete(holdId);
    const estimated = this.estimated;
    if (this.pendingInputTokens > 0) this.estimated = true;
    const inputTokens = this.currentInputTokens();
    const outputTokens = this.currentOutputTokens();
    const { costMicros, lines } = this.metering.price(
      this.input.model,
      inputTokens,
      outputTokens,
      this.images,
    );
    const i = this.input;
    const ws = i.workspaceId;
    const key = i.apiKeyId ?? null;
    const latencyMs = Math.max(0, Math.round(Date.now() - this.startedAt));
    countCreditsDebited(costMicros);
    return {
      ctes: `${SETTLE_CTES}, stl_key as (
         -- A key deleted meanwhile: the record keeps no key (as its foreign key's set null does).
         update api_keys k set request_count = k.request_count + 1, input_tokens = k.input_tokens + ?::bigint,
                output_tokens = k.output_tokens + ?::bigint, cost_micros = k.cost_micros + ?::bigint
          where k.id = ?::uuid and k.workspace_id = ?::uuid and exists (select 1 from stl_amt)
         returning k.id
       ), stl_rec as (
         insert into usage_records (id, workspace_id, api_key_id, app_id, thread_id, session_id, run_id,
           request_id, endpoint, model, meter, input_tokens, output_tokens, cost_micros, provider_status,
           latency_ms, component_lines)
         select gen_random_uuid(), ?::uuid, (select id from stl_key), ?, ?, ?, ?, ?, ?, ?, 'credits',
                ?::bigint, ?::bigint, ?::bigint, ?, ?::int, ?::jsonb
           from stl_amt
       )`,
      params: [
        ...settleParams(ws, holdId, costMicros, this.overdraftMicros, {
          reason: i.endpoint,
          ref: i.requestId,
        }),
        inputTokens,
        outputTokens,
        costMicros,
        key,
        ws,
        ws,
        i.appId ?? null,
        i.threadId ?? null,
        i.sessionId ?? null,
        i.runId ?? null,
        i.requestId,
        i.endpoint,
        i.model.id,
        inputTokens,
        outputTokens,
        costMicros,
        providerStatus,
        latencyMs,
        JSON.stringify(lines),
      ],
      columns: '(select delta from stl_res) as stl_delta, (select change from stl_res) as stl_change',
      committed: (row) => {
        this.held = 0;
        if (row.stl_delta === null || row.stl_delta === undefined) return { costMicros, short: false };
        // Image models learn their output tokens too (as in `finish`).
        if (providerStatus === 'success') this.metering.estimator.observe(this.key, outputTokens);
        return { costMicros, short: settledShort(row.stl_delta, row.stl_change) };
      },
      failed: () => {
        this.finished = false;
        this.estimated = estimated;
        this.metering.leases.add(holdId, () => this.progress());
      },
    };
  }
}
