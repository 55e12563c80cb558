import type { SqlExecutor } from '../db/sql.js';
import { appError } from '../errors/index.js';

/** 402 `INSUFFICIENT_CREDITS`, in the spec's wording for the caller (apps chat has its own). */
export const insufficientCredits = (variant?: 'appsChat') => appError('INSUFFICIENT_CREDITS', { variant });

/** The `credit_holds` row a hold writes: what a settlement after a crash needs. */
export interface HoldRow {
  id: string;
  usedMicros: number;
  inputTokens: number;
  record: Record<string, unknown>;
}

/** Current balance in micro-dollars; 404 when the workspace does not exist. */
export async function balanceMicros(db: () => SqlExecutor, workspaceId: string): Promise<number> {
  const rows = await db().execute<{ b: string }[]>(
    'select credit_balance_micros as b from workspaces where id = ?',
    [workspaceId],
  );
  if (!rows[0]) throw appError('WORKSPACE_NOT_FOUND');
  return Number(rows[0].b);
}

/** 402 `INSUFFICIENT_CREDITS` when the balance cannot cover `atLeastMicros` (default: > 0). */
export async function assertCredits(
  db: () => SqlExecutor,
  workspaceId: string,
  atLeastMicros?: number,
  variant?: 'appsChat',
): Promise<void> {
  const balance = await balanceMicros(db, workspaceId);
  const need = atLeastMicros ?? 1;
  if (balance <= 0 || balance < need) throw insufficientCredits(variant);
}

/**
 * Debits `micros` in one statement, clamped to what is left (`Metering.debit`: the rest is
 * reported `short`).
 */
export async function debit(
  db: () => SqlExecutor,
  workspaceId: string,
  micros: number,
  ref: { reason: string; ref?: string },
): Promise<{ balanceMicros: number; short: boolean }> {
  if (!Number.isSafeInteger(micros) || micros < 0) throw new Error(`Invalid debit amount ${micros}`);
  // One statement: the UPDATE clamps the debit to what is left (SET expressions all read the
  // row as it was, so `last_debit_micros` is what was taken), and the ledger line is written
  // from its RETURNING. Concurrent debits serialise on the row lock; none can be lost.
  const rows = await db().execute<{ after: string; took: string }[]>(
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
  if (!row) throw appError('WORKSPACE_NOT_FOUND');
  return { balanceMicros: Number(row.after), short: Number(row.took) < micros };
}

/**
 * Takes `micros` off the balance only if the balance covers it, and records the hold as a
 * `credit_holds` row: ONE conditional statement (UPDATE … WHERE credit_balance_micros >=
 * $hold, its ledger line `debit`, the hold row). Concurrent holds serialise on the
 * workspace row and each re-reads the balance the previous one left, so the holds granted
 * never sum above the balance. False when it does not cover it; 404 when the workspace does
 * not exist.
 */
export async function hold(
  db: () => SqlExecutor,
  holdLeaseMs: number,
  workspaceId: string,
  micros: number,
  ref: { reason: string; ref?: string },
  row?: HoldRow,
  /** How far below zero this hold may take the balance (what a companion hold prepaid for it). */
  prepaidMicros = 0,
  /** Commit without waiting for the WAL flush (see `GenerationOptions.asyncCommit`). */
  asyncCommit = false,
): Promise<boolean> {
  if (!Number.isSafeInteger(micros) || micros <= 0) throw new Error(`Invalid hold amount ${micros}`);
  const rows = await db().execute<{ after: string }[]>(
    `with async_commit as (select set_config('synchronous_commit', ?, true) as v), upd as (
         update workspaces set credit_balance_micros = credit_balance_micros - ?::bigint, updated_at = now()
         where id = ? and credit_balance_micros + ?::bigint >= ?::bigint
         returning id, credit_balance_micros as after
       ), led as (
         insert into credit_ledger (id, workspace_id, amount_micros, balance_after_micros, kind, reason, ref)
         select gen_random_uuid(), upd.id, -?::bigint, upd.after, 'debit', ?, ? from upd
       ), h as (
         insert into credit_holds (id, workspace_id, reason, ref, held_micros, used_micros, input_tokens,
                                   record, expires_at)
         select ?::uuid, upd.id, ?, ?, ?::bigint, ?::bigint, ?::bigint, ?::jsonb,
                now() + (?::text || ' milliseconds')::interval
           from upd where ?::boolean
       )
       select after from upd cross join async_commit`,
    [
      asyncCommit ? 'off' : 'on',
      micros,
      workspaceId,
      Math.max(0, Math.floor(prepaidMicros)),
      micros,
      micros,
      ref.reason,
      ref.ref ?? null,
      row?.id ?? '00000000-0000-0000-0000-000000000000',
      ref.reason,
      ref.ref ?? null,
      micros,
      row?.usedMicros ?? 0,
      row?.inputTokens ?? 0,
      JSON.stringify(row?.record ?? {}),
      holdLeaseMs,
      !!row,
    ],
  );
  if (rows[0]) return true;
  await balanceMicros(db, workspaceId); // 404 when the workspace does not exist
  return false;
}

/**
 * Tops hold `holdId` up by `micros` in one statement (ledger line `debit`; the hold row
 * notes what was used so far, for a settlement after a crash). The balance may go below
 * zero by at most `overdraftMicros`. False when it cannot.
 */
export async function topUp(
  db: () => SqlExecutor,
  holdLeaseMs: number,
  workspaceId: string,
  holdId: string,
  micros: number,
  overdraftMicros: number,
  ref: { reason: string; ref?: string; usedMicros: number; inputTokens: number; outputTokens: number },
): Promise<boolean> {
  const rows = await db().execute<{ after: string }[]>(
    `with upd as (
         update workspaces set credit_balance_micros = credit_balance_micros - ?::bigint, updated_at = now()
         where id = ? and credit_balance_micros - ?::bigint >= -?::bigint
         returning id, credit_balance_micros as after
       ), led as (
         insert into credit_ledger (id, workspace_id, amount_micros, balance_after_micros, kind, reason, ref)
         select gen_random_uuid(), upd.id, -?::bigint, upd.after, 'debit', ?, ? from upd
       ), h as (
         update credit_holds set held_micros = held_micros + ?::bigint, used_micros = ?::bigint,
                input_tokens = ?::bigint, output_tokens = ?::bigint,
                expires_at = now() + (?::text || ' milliseconds')::interval
          where id = ? and exists (select 1 from upd)
       )
       select after from upd`,
    [
      micros,
      workspaceId,
      micros,
      Math.max(0, overdraftMicros),
      micros,
      ref.reason,
      ref.ref ?? null,
      micros,
      ref.usedMicros,
      ref.inputTokens,
      ref.outputTokens,
      holdLeaseMs,
      holdId,
    ],
  );
  return rows.length > 0;
}
