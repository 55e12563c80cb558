import type { SqlExecutor } from '../db/sql.js';
import { appError } from '../errors/index.js';
import type { ModelInfo } from '../providers/llm.js';
import { countCreditsDebited } from '../telemetry/metrics.js';
import * as admission from './admission.js';
import { ADMISSION_BATCH_MAX, AdmissionBatcher } from './admission-batch.js';
import * as credits from './credits.js';
import { OutputEstimator } from './estimator.js';
import * as generation from './generation.js';
import type { GenerationMeter } from './generation-meter.js';
import { HoldLeases } from './holds.js';
import * as pricing from './pricing.js';
import * as quota from './quota.js';
import * as rateLimits from './rate-limit.js';
import type { MeteringSettings } from './settings.js';
import * as settlement from './settlement.js';
import type {
  GenerationInput,
  KeyAdmission,
  Metering,
  RateLimitBucket,
  StatementHold,
  UsageComponentLine,
  UsageRecordInput,
} from './types.js';
import * as usage from './usage.js';
import { UsageBatcher, type UsageRow, usageRow } from './usage.js';

/**
 * The metering service on PostgreSQL (server or embedded): every balance change and counter
 * is one SQL statement, so any number of server processes sharing the database agree.
 */
export class PgMetering implements Metering {
  /** Expected reply lengths, shared by the clones `using` makes. */
  readonly estimator: OutputEstimator;
  /** Heartbeat of this process's holds, shared by the clones. */
  readonly leases: HoldLeases;

  constructor(
    /** Where statements run: a fresh entity manager per call, or the plain pool (`using`). */
    private readonly db: () => SqlExecutor,
    readonly settings: MeteringSettings,
    shared?: { estimator: OutputEstimator; leases: HoldLeases },
  ) {
    this.estimator = shared?.estimator ?? new OutputEstimator(settings);
    this.leases = shared?.leases ?? new HoldLeases(db, settings.holdLeaseMs);
  }

  /**
   * The same metering running its statements on `executor` (the `/chat` hot path's pool);
   * `batchUsage` gathers usage records into one statement per few milliseconds
   * (`UsageBatcher`). Call `close()` on it at shutdown to write what is pending.
   */
  using(executor: SqlExecutor, opts: { batchUsage?: boolean; batchAdmissions?: boolean } = {}): PgMetering {
    const m = new PgMetering(() => executor, this.settings, {
      estimator: this.estimator,
      leases: this.leases,
    });
    if (opts.batchUsage) m.batcher = new UsageBatcher((rows) => m.writeUsage(rows));
    const max = this.settings.admissionBatchMax ?? ADMISSION_BATCH_MAX;
    if (opts.batchAdmissions && max > 1) {
      m.admissions = new AdmissionBatcher(() => executor, this.settings.rateLimits, max);
    }
    return m;
  }

  private batcher: UsageBatcher | undefined;
  /** Key admissions gathered while one is in flight (`AdmissionBatcher`), when `using` asked for it. */
  private admissions: AdmissionBatcher | undefined;

  /** Writes the pending batched usage records (no-op without batching); stops the hold heartbeat. */
  async close(): Promise<void> {
    this.leases.stop();
    await this.batcher?.close();
  }

  // ---- token quota (/chat) -------------------------------------------------------------

  tokenQuotaStatus(workspaceId: string, now = new Date()): Promise<quota.TokenQuotaStatus> {
    return quota.tokenQuotaStatus(this.db, workspaceId, now);
  }

  async assertTokenQuota(workspaceId: string): Promise<void> {
    const s = await this.tokenQuotaStatus(workspaceId);
    if (s.quota !== null && s.used >= s.quota) throw appError('TOKEN_LIMIT_EXCEEDED');
  }

  // ---- credits -----------------------------------------------------------------------------

  balanceMicros(workspaceId: string): Promise<number> {
    return credits.balanceMicros(this.db, workspaceId);
  }

  assertCredits(workspaceId: string, atLeastMicros?: number, variant?: 'appsChat'): Promise<void> {
    return credits.assertCredits(this.db, workspaceId, atLeastMicros, variant);
  }

  debit(
    workspaceId: string,
    micros: number,
    ref: { reason: string; ref?: string },
  ): Promise<{ balanceMicros: number; short: boolean }> {
    return credits.debit(this.db, workspaceId, micros, ref);
  }

  /** Takes a hold off the balance if it covers it (`credits.ts` `hold`). */
  hold(
    workspaceId: string,
    micros: number,
    ref: { reason: string; ref?: string },
    row?: credits.HoldRow,
    prepaidMicros = 0,
    asyncCommit = false,
  ): Promise<boolean> {
    return credits.hold(
      this.db,
      this.settings.holdLeaseMs,
      workspaceId,
      micros,
      ref,
      row,
      prepaidMicros,
      asyncCommit,
    );
  }

  /** Tops a hold up (`credits.ts` `topUp`). */
  topUp(
    workspaceId: string,
    holdId: string,
    micros: number,
    overdraftMicros: number,
    ref: { reason: string; ref?: string; usedMicros: number; inputTokens: number; outputTokens: number },
  ): Promise<boolean> {
    return credits.topUp(
      this.db,
      this.settings.holdLeaseMs,
      workspaceId,
      holdId,
      micros,
      overdraftMicros,
      ref,
    );
  }

  /** Settles a hold against its cost (`settlement.ts` `settle`); undefined when the hold is gone. */
  settle(
    workspaceId: string,
    holdId: string,
    costMicros: number,
    overdraftMicros: number,
    ref: { reason: string; ref?: string },
  ): Promise<{ short: boolean } | undefined> {
    return settlement.settle(this.db, workspaceId, holdId, costMicros, overdraftMicros, ref);
  }

  settleExpired(): Promise<number> {
    return settlement.settleExpired(this.db);
  }

  /** Price of one chunk of output (`creditCheckEveryTokens` tokens), at least 1 µ$. */
  chunkMicros(model: ModelInfo): number {
    return pricing.chunkMicros(this.settings, model);
  }

  price(
    model: ModelInfo,
    inputTokens: number,
    outputTokens: number,
    images = 0,
  ): { costMicros: number; lines: UsageComponentLine[] } {
    return pricing.price(model, inputTokens, outputTokens, images);
  }

  // ---- usage records -----------------------------------------------------------------------

  /**
   * Writes one usage record with its key's totals and the workspace's cycle tokens. On a
   * metering made with `using(pool, { batchUsage: true })` records are gathered for a few
   * milliseconds and written together; the promise settles when its batch is committed.
   */
  async record(rec: UsageRecordInput): Promise<void> {
    let cycle: Date | null = null;
    if (rec.meter === 'tokens' && (rec.inputTokens + rec.outputTokens > 0 || rec.reservationId)) {
      cycle = rec.cycleStart ?? (await this.tokenQuotaStatus(rec.workspaceId)).cycleStart;
    }
    const row = usageRow(rec, cycle);
    if (rec.meter === 'credits') countCreditsDebited(rec.costMicros);
    if (this.batcher) return this.batcher.add(row);
    await this.writeUsage([row]);
  }

  /** Writes usage records in one statement (`usage.ts` `writeUsage`). */
  writeUsage(rows: UsageRow[]): Promise<void> {
    return usage.writeUsage(this.db, rows);
  }

  // ---- rate limits -------------------------------------------------------------------------

  rateLimit(workspaceId: string, bucket: RateLimitBucket): Promise<Record<string, string>> {
    return rateLimits.rateLimit(this.db, this.settings.rateLimits, workspaceId, bucket);
  }

  admitKeyRequest(
    keyHash: string,
    bucket: RateLimitBucket,
    admit: boolean,
    reserveTokens = 1,
  ): Promise<KeyAdmission | undefined> {
    if (this.admissions) return this.admissions.admit(keyHash, bucket, admit, reserveTokens);
    return admission.admitKeyRequest(
      this.db,
      this.settings.rateLimits,
      keyHash,
      bucket,
      admit,
      reserveTokens,
    );
  }

  reserveQuota(
    workspaceId: string,
    reserveTokens: number,
  ): Promise<{ quota: number | null; cycleStart: Date; reservationId: string | null }> {
    return admission.reserveQuota(this.db, workspaceId, reserveTokens);
  }

  // ---- generations ---------------------------------------------------------------------------

  expectedHoldMicros(model: ModelInfo, endpoint: string, inputTokens: number): number {
    return generation.expectedHoldMicros(this, model, endpoint, inputTokens);
  }

  startGeneration(input: GenerationInput, opts: generation.GenerationOptions = {}): Promise<GenerationMeter> {
    return generation.startGeneration(this, input, opts);
  }

  holdInStatement(
    input: Omit<GenerationInput, 'workspaceId' | 'apiKeyId' | 'sessionId'>,
    opts: { inputChars: number; maxTokens?: number },
  ): StatementHold {
    return generation.holdInStatement(this, input, opts);
  }
}
