import type { SqlExecutor } from '../db/sql.js';
import type { ModelInfo } from '../providers/llm.js';
import { price } from './pricing.js';
import type { GenerationInput } from './types.js';
import { usageRow, writeUsage } from './usage.js';

/**
 * The settlement of a hold as CTEs (`settle`, and `settlementInStatement` inside a caller's
 * statement): the hold deleted first (`stl_h`; none when the sweep settled it already), then ONE
 * UPDATE of the workspace's balance (`stl_upd`): the refund, or the debit beyond the hold, at
 * most `overdraft` below zero — computed in its SET from the row it updates, so it needs no
 * `SELECT … FOR UPDATE` before it (decision 0031: that pair deadlocked two settlements now
 * and then) and takes the row `FOR NO KEY UPDATE`, which the foreign keys' `FOR KEY SHARE` does
 * not wait for. `last_debit_micros` notes what was taken (minus a refund) for RETURNING, as
 * `debit` does. Then the ledger line. `stl_res` has a row when the hold was there (`delta`:
 * held − cost, `change`: the refund or minus the debit taken); `stl_done` always has one, once
 * the balance was written (a caller's writes select from it to lock after the balance).
 * Parameters: `settleParams`.
 */
export const SETTLE_CTES = `stl_h as (
         delete from credit_holds where id = ? and workspace_id = ? returning held_micros
       ), stl_amt as (
         select h.held_micros - ?::bigint as delta from stl_h h
       ), stl_upd as (
         update workspaces w set
           credit_balance_micros = w.credit_balance_micros + case when a.delta >= 0 then a.delta
             else -least(-a.delta, greatest(w.credit_balance_micros + x.overdraft, 0)) end,
           last_debit_micros = case when a.delta >= 0 then -a.delta
             else least(-a.delta, greatest(w.credit_balance_micros + x.overdraft, 0)) end,
           updated_at = now()
           from stl_amt a, (select ?::bigint as overdraft) x
          where w.id = ? and a.delta <> 0
         returning w.id, w.credit_balance_micros as after, -w.last_debit_micros as change
       ), stl_led as (
         insert into credit_ledger (id, workspace_id, amount_micros, balance_after_micros, kind, reason, ref)
         select gen_random_uuid(), u.id, u.change, u.after, case when u.change > 0 then 'refund' else 'debit' end,
                ?, ?
           from stl_upd u where u.change <> 0
       ), stl_res as (
         select a.delta, coalesce((select change from stl_upd), 0) as change from stl_amt a
       ), stl_done as (
         select count(*) as n from stl_upd
       )`;

export const settleParams = (
  workspaceId: string,
  holdId: string,
  costMicros: number,
  overdraftMicros: number,
  ref: { reason: string; ref?: string | null },
): unknown[] => [
  holdId,
  workspaceId,
  costMicros,
  Math.max(0, overdraftMicros),
  workspaceId,
  ref.reason,
  ref.ref ?? null,
];

/** Whether a settlement's debit was cut at the overdraft (`stl_amt`'s `delta`, `change`). */
export const settledShort = (delta: unknown, change: unknown): boolean => {
  const d = Number(delta);
  return d < 0 && -Number(change) < -d;
};

/** What a hold row keeps to write its usage record if its process dies. */
export interface ExpiredHoldRecord {
  usage: Omit<GenerationInput, 'model' | 'insufficientVariant'>;
  model: string;
  inputPricePerMTok: number;
  outputPricePerMTok: number;
  pricePerImage: number | null;
}

/**
 * Settles hold `holdId` against its cost in one statement (`SETTLE_CTES`): the hold row is
 * deleted, and the difference is refunded (`refund`) or debited (`debit`; at most
 * `overdraftMicros` below zero, the rest reported `short`). Undefined when the hold is gone
 * (settled already by the sweep).
 */
export async function settle(
  db: () => SqlExecutor,
  workspaceId: string,
  holdId: string,
  costMicros: number,
  overdraftMicros: number,
  ref: { reason: string; ref?: string },
): Promise<{ short: boolean } | undefined> {
  const rows = await db().execute<{ delta: string; change: string | null }[]>(
    `with ${SETTLE_CTES} select delta, change from stl_res`,
    settleParams(workspaceId, holdId, costMicros, overdraftMicros, ref),
  );
  const row = rows[0];
  if (!row) return undefined;
  return { short: settledShort(row.delta, row.change) };
}

/**
 * Settles holds whose process died (their lease expired without a heartbeat): refunds what
 * was held and not used by the last top-up (ledger `refund`, the request's `ref`), and writes
 * its usage record (`provider_status` `aborted`) with what was used. Also drops `/chat` quota
 * reservations past their expiry. Called by the run engine's sweep. Returns the holds settled.
 */
export async function settleExpired(db: () => SqlExecutor): Promise<number> {
  const ex = db();
  await ex.execute(
    `with d as (
         delete from token_reservations where expires_at < now() returning workspace_id, cycle_start, tokens
       ), s as (
         select workspace_id, cycle_start, sum(tokens) as t from d group by workspace_id, cycle_start
       )
       update workspace_token_usage u set reserved = greatest(0, u.reserved - s.t)
         from s where u.workspace_id = s.workspace_id and u.cycle_start = s.cycle_start`,
  );
  const due = await ex.execute<{ id: string }[]>(
    'select id from credit_holds where expires_at < now() order by expires_at limit 100',
  );
  let n = 0;
  for (const d of due) {
    const rows = await ex.execute<
      {
        held_micros: string;
        used_micros: string;
        input_tokens: string;
        output_tokens: string;
        record: ExpiredHoldRecord | string;
        created_at: Date | string;
      }[]
    >(
      // The hold first, then one UPDATE of the balance (the order and the form of `SETTLE_CTES`).
      `with h as (
           delete from credit_holds where id = ? and expires_at < now() returning *
         ), upd as (
           update workspaces set credit_balance_micros = credit_balance_micros + (h.held_micros - h.used_micros),
                  updated_at = now()
             from h where workspaces.id = h.workspace_id and h.held_micros > h.used_micros
           returning workspaces.id, credit_balance_micros as after, h.held_micros - h.used_micros as change,
                     h.reason, h.ref
         ), led as (
           insert into credit_ledger (id, workspace_id, amount_micros, balance_after_micros, kind, reason, ref)
           select gen_random_uuid(), upd.id, upd.change, upd.after, 'refund', upd.reason, upd.ref from upd
         )
         select held_micros, used_micros, input_tokens, output_tokens, record, created_at from h`,
      [d.id],
    );
    const h = rows[0];
    if (!h) continue;
    n++;
    const rec = (typeof h.record === 'string' ? JSON.parse(h.record) : h.record) as ExpiredHoldRecord;
    const model = {
      id: rec.model,
      inputPricePerMTok: rec.inputPricePerMTok,
      outputPricePerMTok: rec.outputPricePerMTok,
      pricePerImage: rec.pricePerImage ?? null,
    } as ModelInfo;
    const { lines } = price(model, Number(h.input_tokens), Number(h.output_tokens));
    await writeUsage(db, [
      {
        ...usageRow(
          {
            ...rec.usage,
            model: rec.model,
            inputTokens: Number(h.input_tokens),
            outputTokens: Number(h.output_tokens),
            // What the hold paid for: the last progress mark, at most the hold.
            costMicros: Math.min(Number(h.used_micros), Number(h.held_micros)),
            providerStatus: 'aborted',
            latencyMs: Date.now() - new Date(h.created_at).getTime(),
            componentLines: lines,
          },
          null,
        ),
      },
    ]);
  }
  return n;
}
