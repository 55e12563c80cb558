import { randomUUID } from 'node:crypto';
import type { ModelInfo } from '../providers/llm.js';
import { type HoldRow, insufficientCredits } from './credits.js';
import { estimatorKey } from './estimator.js';
import { GenerationMeter, type MeterHost } from './generation-meter.js';
import { lineCost } from './pricing.js';
import type { MeteringSettings } from './settings.js';
import type { ExpiredHoldRecord } from './settlement.js';
import type { GenerationInput, Metering, StatementHold } from './types.js';

/**
 * What starting a generation uses of the metering (`PgMetering`): a meter's host, plus the
 * token quota check and the credit hold.
 */
export interface GenerationHost extends MeterHost, Pick<Metering, 'assertTokenQuota'> {
  readonly settings: Pick<MeteringSettings, 'creditCheckEveryTokens' | 'holdLeaseMs'>;
  /** Takes a hold off the balance if it covers it (`credits.ts` `hold`). */
  hold(
    workspaceId: string,
    micros: number,
    ref: { reason: string; ref?: string },
    row?: HoldRow,
    prepaidMicros?: number,
    asyncCommit?: boolean,
  ): Promise<boolean>;
}

/** Start options of a generation: what sizes its hold. */
export interface GenerationOptions {
  /** Lower bound of the hold (e.g. an image's price). */
  minimumMicros?: number;
  /** Input tokens about to be sent (estimated): held up front, recorded if no usage comes back. */
  inputTokens?: number;
  /**
   * Input tokens expected (estimated) when they are not to be recorded if no usage comes back
   * (a provider that bills nothing for a failed call: images): held up front only, corrected
   * by the learned ratio like `inputTokens`. Ignored when `inputTokens` is given.
   */
  expectedInputTokens?: number;
  /**
   * Micro-dollars held on top, for a companion call of the same request on another model
   * whose hold comes later (document QA: the answer's hold, taken first, also covers the
   * query embedding). Refunded at `finish` like any unused part of the hold.
   */
  extraMicros?: number;
  /**
   * What a companion hold of the same request already holds for this one (its `extraMicros`):
   * this hold may take the balance that far below zero, since that money is held already.
   */
  prepaidMicros?: number;
  /** The request's output limit: caps the expected reply the hold is sized for. */
  maxTokens?: number;
  /**
   * Commit the hold without waiting for the WAL flush (`synchronous_commit` off for its
   * statement), as the one-statement admissions of `/chat` and app chat do. The workspace's
   * balance row, which every hold and settlement of the workspace locks, is then released at
   * commit instead of after the flush. A database crash may lose the last such holds: their
   * turns' settlements then find no hold and charge nothing (an under-charge, never a double
   * charge).
   */
  asyncCommit?: boolean;
}

/**
 * The hold `startGeneration` would take for a call of `model` on `endpoint` sending
 * `inputTokens` (estimated) and expecting the learned reply: to size a companion hold's
 * `extraMicros` / `prepaidMicros`.
 */
export function expectedHoldMicros(
  m: GenerationHost,
  model: ModelInfo,
  endpoint: string,
  inputTokens: number,
): number {
  const key = estimatorKey(model.id, endpoint);
  const raw = Number.isFinite(inputTokens) && inputTokens > 0 ? Math.ceil(inputTokens) : 0;
  const input = lineCost(Math.ceil(raw * m.estimator.inputFactor(key)), model.inputPricePerMTok);
  const output = lineCost(m.estimator.expect(key), model.outputPricePerMTok);
  return Math.max(1, input + output);
}

/**
 * Starts a metered generation. Credits meter: takes the hold (the known input cost, from
 * `inputTokens`, plus the expected reply: learned per model, capped by `maxTokens`; at least
 * `minimumMicros` and 1 µ$) in one conditional statement, 402 with the caller's message
 * when the balance cannot cover it (nothing is held then). Tokens meter: 403 when the quota
 * is spent. Then a `GenerationMeter` to feed and finish (always `finish` in `finally`; a
 * hold its process never finished is settled by the run engine's sweep).
 */
export async function startGeneration(
  m: GenerationHost,
  input: GenerationInput,
  opts: GenerationOptions = {},
): Promise<GenerationMeter> {
  const known = (n: number | undefined) =>
    n !== undefined && Number.isFinite(n) && n > 0 ? Math.ceil(n) : 0;
  const key = estimatorKey(input.model.id, input.endpoint);
  const rawInput = known(opts.inputTokens);
  const factor = m.estimator.inputFactor(key);
  if (input.meter !== 'credits') {
    await m.assertTokenQuota(input.workspaceId);
    return new GenerationMeter(m, input, 0, null, rawInput, 0, factor);
  }
  const inputTokens = Math.ceil(rawInput * factor);
  const inputCost = lineCost(inputTokens, input.model.inputPricePerMTok);
  // Input held but not recorded on failure (images): the recorded part above counts as used.
  const expectedRaw = rawInput > 0 ? 0 : known(opts.expectedInputTokens);
  const expectedInputCost = lineCost(Math.ceil(expectedRaw * factor), input.model.inputPricePerMTok);
  const expectedOutput = m.estimator.expect(key, opts.maxTokens);
  const outputCost = lineCost(expectedOutput, input.model.outputPricePerMTok);
  // An image model bills its image price on top of its tokens (gpt-image: both).
  const imageMicros =
    input.model.kind === 'image' ? Math.round((input.model.pricePerImage ?? 0) * 1_000_000) : 0;
  const held =
    Math.max(1, known(opts.minimumMicros), imageMicros + inputCost + expectedInputCost + outputCost) +
    known(opts.extraMicros);
  const id = randomUUID();
  const { insufficientVariant: _m, model, ...usage } = input;
  const record: ExpiredHoldRecord = {
    usage: { ...usage, cycleStart: undefined },
    model: model.id,
    inputPricePerMTok: model.inputPricePerMTok,
    outputPricePerMTok: model.outputPricePerMTok,
    pricePerImage: model.pricePerImage ?? null,
  };
  const ok = await m.hold(
    input.workspaceId,
    held,
    { reason: input.endpoint, ref: input.requestId },
    {
      id,
      usedMicros: Math.min(held, inputCost),
      inputTokens,
      record: record as unknown as Record<string, unknown>,
    },
    known(opts.prepaidMicros),
    opts.asyncCommit === true,
  );
  if (!ok) throw insufficientCredits(input.insufficientVariant);
  const meter = new GenerationMeter(m, input, held, id, rawInput, held, factor);
  meter.expectInput(expectedRaw);
  return meter;
}

/**
 * `startGeneration`'s credit hold (credits meter, no minimum, companion or image part) as
 * CTEs of the caller's statement: see `StatementHold`. The amount is computed in SQL from
 * the same figures and in the same floating-point steps (`float8`, as JavaScript's numbers):
 * input tokens ⌈⌈chars / 4⌉ × learned ratio⌉ at the model's input price, plus the expected
 * reply (learned, capped by `maxTokens`) at its output price, at least 1 µ$; taken only if
 * the balance covers it (`hold`'s condition), with its ledger line and hold row.
 */
export function holdInStatement(
  m: GenerationHost,
  input: Omit<GenerationInput, 'workspaceId' | 'apiKeyId' | 'sessionId'>,
  opts: { inputChars: number; maxTokens?: number },
): StatementHold {
  const key = estimatorKey(input.model.id, input.endpoint);
  const factor = m.estimator.inputFactor(key);
  const outputCost = lineCost(m.estimator.expect(key, opts.maxTokens), input.model.outputPricePerMTok);
  const imageMicros =
    input.model.kind === 'image' ? Math.round((input.model.pricePerImage ?? 0) * 1_000_000) : 0;
  const id = randomUUID();
  const { insufficientVariant: _m, model, ...usage } = input;
  const record = {
    model: model.id,
    inputPricePerMTok: model.inputPricePerMTok,
    outputPricePerMTok: model.outputPricePerMTok,
    pricePerImage: model.pricePerImage ?? null,
  };
  const chars = Number.isFinite(opts.inputChars) && opts.inputChars > 0 ? Math.ceil(opts.inputChars) : 0;
  return {
    ctes: `hold_amt as (
         select s.workspace_id, s.usage_patch, c.tokens, c.input_cost, greatest(1, c.input_cost + ?::bigint) as held
           from hold_src s cross join lateral (
             select t.tokens, ceil(t.tokens::float8 * ?::float8 - 1e-9::float8)::bigint as input_cost
               from (select ceil(ceil((?::bigint + s.extra_chars)::float8 / 4) * ?::float8)::bigint as tokens) t
           ) c
       ), hold_upd as (
         update workspaces w set credit_balance_micros = w.credit_balance_micros - x.held, updated_at = now()
           from hold_amt x
          where w.id = x.workspace_id and w.credit_balance_micros >= x.held
         returning w.id, w.credit_balance_micros as after, x.held, x.input_cost, x.tokens, x.usage_patch
       ), hold_led as (
         insert into credit_ledger (id, workspace_id, amount_micros, balance_after_micros, kind, reason, ref)
         select gen_random_uuid(), hold_upd.id, -hold_upd.held, hold_upd.after, 'debit', ?, ? from hold_upd
       ), hold_row as (
         insert into credit_holds (id, workspace_id, reason, ref, held_micros, used_micros, input_tokens,
                                   record, expires_at)
         select ?::uuid, hold_upd.id, ?, ?, hold_upd.held, least(hold_upd.held, hold_upd.input_cost),
                hold_upd.tokens, ?::jsonb || jsonb_build_object('usage', ?::jsonb || hold_upd.usage_patch),
                now() + (?::text || ' milliseconds')::interval
           from hold_upd
       )`,
    params: [
      imageMicros + outputCost,
      model.inputPricePerMTok,
      chars,
      factor,
      input.endpoint,
      input.requestId,
      id,
      input.endpoint,
      input.requestId,
      JSON.stringify(record),
      JSON.stringify(usage),
      m.settings.holdLeaseMs,
    ],
    adopt: (full, heldMicros, inputTokens) => {
      const raw = Number.isFinite(inputTokens) && inputTokens > 0 ? Math.ceil(inputTokens) : 0;
      return new GenerationMeter(m, full, heldMicros, id, raw, heldMicros, factor);
    },
  };
}
