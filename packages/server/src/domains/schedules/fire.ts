import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { ServerDeps } from '../../context.js';
import { ERRORS } from '../../errors/index.js';
import { runStore } from '../../runs/index.js';
import { effectiveConfig } from '../agents/config.js';
import { insertAutonomousRun } from '../runs/create.js';
import { nextTick } from './cron.js';

type Row = Record<string, unknown>;

/** A row of `agent_schedules`. */
export interface ScheduleRow {
  id: string;
  workspace_id: string;
  app_id: string;
  cron: string;
  timezone: string;
  task: string;
  enabled: boolean;
  overlap: 'skip' | 'queue';
  metadata: Record<string, string>;
  next_run_at: Date | null;
  last_run_at: Date | null;
  last_run_id: string | null;
  created_at: Date;
  updated_at: Date;
}

const date = (v: unknown) => (v == null ? null : v instanceof Date ? v : new Date(String(v)));

export function toScheduleRow(r: Row): ScheduleRow {
  const meta = typeof r.metadata === 'string' ? JSON.parse(r.metadata) : r.metadata;
  return {
    id: r.id as string,
    workspace_id: r.workspace_id as string,
    app_id: r.app_id as string,
    cron: r.cron as string,
    timezone: r.timezone as string,
    task: r.task as string,
    enabled: Boolean(r.enabled),
    overlap: r.overlap as 'skip' | 'queue',
    metadata: (meta ?? {}) as Record<string, string>,
    next_run_at: date(r.next_run_at),
    last_run_at: date(r.last_run_at),
    last_run_id: (r.last_run_id as string | null) ?? null,
    created_at: date(r.created_at) as Date,
    updated_at: date(r.updated_at) as Date,
  };
}

export const SKIPPED_OVERLAP = 'The previous run of the schedule is still running';

/**
 * Test seam of the multi-process tests: runs while a tick is claimed (its schedule row
 * locked) and before its run is written. Unset in the product.
 */
export const tickHooks: { afterClaim?: (scheduleId: string, tickAt: Date) => Promise<void> } = {};

/**
 * Writes the run a schedule starts, in the caller's transaction. Its metadata is the schedule's
 * plus `source: "schedule"`, `scheduleId` and `scheduleTickAt`; a tick's run carries the
 * idempotency key `schedule:<id>:<tick time>` (so a tick can never make two runs). With
 * `creditError` set the run is written already failed with that reason: a workspace out of
 * credits sees the failed run rather than a silent skip.
 */
export async function writeScheduledRun(
  tx: EntityManager,
  deps: ServerDeps,
  s: ScheduleRow,
  opts: { trigger: 'schedule' | 'manual'; tickAt: Date; apiKeyId: string | null; requestId: string },
  creditError: string | null,
) {
  const { webhookUrl, ...meta } = s.metadata;
  const tickIso = opts.tickAt.toISOString();
  const created = await insertAutonomousRun(tx, deps, {
    workspaceId: s.workspace_id,
    agentId: s.app_id,
    task: s.task,
    metadata: { ...meta, source: 'schedule', scheduleId: s.id, scheduleTickAt: tickIso },
    messageId: opts.trigger === 'schedule' ? `schedule:${s.id}:${tickIso}` : null,
    webhookUrl: webhookUrl ?? null,
    source: 'schedule',
    scheduleId: s.id,
    apiKeyId: opts.apiKeyId,
    requestId: opts.requestId,
  });
  if (!created) return null;
  if (creditError) {
    await runStore.finish(tx, created.runId, null, 'failed', { error: creditError }, creditError);
  }
  return created;
}

/**
 * The credit check of a run no caller waits for (metering's `assertCredits`, read through the
 * tick's own transaction: an embedded database has one connection, so a second one would
 * wait for this transaction): the 402's message when the workspace has no credit, else null.
 */
export async function creditShortfall(tx: EntityManager, workspaceId: string): Promise<string | null> {
  const rows = await tx.execute<Row[]>('select credit_balance_micros as b from workspaces where id = ?', [
    workspaceId,
  ]);
  return Number(rows[0]?.b ?? 0) > 0 ? null : ERRORS.INSUFFICIENT_CREDITS.message;
}

export async function recordTick(
  tx: EntityManager,
  t: {
    scheduleId: string;
    workspaceId: string;
    tickAt: Date;
    trigger: 'schedule' | 'manual';
    status: 'started' | 'skipped' | 'failed';
    runId: string | null;
    reason: string | null;
  },
): Promise<boolean> {
  const rows = await tx.execute<Row[]>(
    `insert into schedule_ticks (id, schedule_id, workspace_id, tick_at, trigger, status, run_id, reason)
     values (?, ?, ?, ?, ?, ?, ?, ?)
     on conflict (schedule_id, tick_at) where trigger = 'schedule' do nothing returning id`,
    [randomUUID(), t.scheduleId, t.workspaceId, t.tickAt, t.trigger, t.status, t.runId, t.reason],
  );
  return rows.length > 0;
}

/**
 * Fires the most overdue due tick of any schedule, if one is free, in ONE transaction
 * (decision 0045): the schedule row is locked (`for update skip locked`: another process takes
 * another schedule, or nothing), the tick is recorded under its unique key (schedule, tick
 * time), its run is written, and `next_run_at` moves to the first firing after now — so after
 * downtime only the one overdue tick fires. A process that dies before the commit leaves
 * nothing behind: the lock goes with its connection and the next pass fires the tick.
 * Returns whether a tick was claimed (and whether a run was created, to wake the workers).
 */
export async function fireNextDueTick(deps: ServerDeps): Promise<{ claimed: boolean; runCreated: boolean }> {
  return deps.em().transactional(async (tx) => {
    const rows = await tx.execute<Row[]>(
      `select s.*, a.config as agent_config, now() as db_now
       from agent_schedules s join apps a on a.id = s.app_id
       where s.enabled and s.next_run_at <= now()
       order by s.next_run_at limit 1
       for update of s skip locked`,
    );
    const row = rows[0];
    if (!row) return { claimed: false, runCreated: false };
    const s = toScheduleRow(row);
    const tickAt = s.next_run_at as Date;
    const now = date(row.db_now) as Date;
    await tickHooks.afterClaim?.(s.id, tickAt);

    let outcome: TickOutcome;
    try {
      // A savepoint: a tick that cannot be fired is recorded as failed and the schedule moves
      // on, rather than being retried at every pass ahead of every other schedule.
      outcome = await tx.transactional((inner) => fireTick(inner, deps, s, row, tickAt));
    } catch (err) {
      deps.log.error({ err, scheduleId: s.id }, 'schedule tick failed');
      outcome = { status: 'failed', reason: 'The run could not be created', runId: null };
    }
    const { status, reason, runId } = outcome;
    await recordTick(tx, {
      scheduleId: s.id,
      workspaceId: s.workspace_id,
      tickAt,
      trigger: 'schedule',
      status,
      runId,
      reason,
    });
    const next = safeNextTick(s, new Date(Math.max(now.getTime(), tickAt.getTime())));
    await tx.execute(
      `update agent_schedules set next_run_at = ?,
         last_run_at = case when ?::uuid is null then last_run_at else ? end,
         last_run_id = coalesce(?::uuid, last_run_id)
       where id = ?`,
      [next, runId, tickAt, runId, s.id],
    );
    return { claimed: true, runCreated: runId !== null };
  });
}

interface TickOutcome {
  status: 'started' | 'skipped' | 'failed';
  reason: string | null;
  runId: string | null;
}

async function fireTick(
  tx: EntityManager,
  deps: ServerDeps,
  s: ScheduleRow,
  row: Row,
  tickAt: Date,
): Promise<TickOutcome> {
  if (!effectiveConfig(row.agent_config).capabilities.deliverables.enabled) {
    return { status: 'failed', reason: ERRORS.DELIVERABLES_DISABLED.message, runId: null };
  }
  if (s.overlap === 'skip' && s.last_run_id && (await isLive(tx, s.last_run_id))) {
    return { status: 'skipped', reason: SKIPPED_OVERLAP, runId: null };
  }
  const creditError = await creditShortfall(tx, s.workspace_id);
  const created = await writeScheduledRun(
    tx,
    deps,
    s,
    { trigger: 'schedule', tickAt, apiKeyId: null, requestId: `schedule-${randomUUID()}` },
    creditError,
  );
  return creditError
    ? { status: 'failed', reason: creditError, runId: created?.runId ?? null }
    : { status: 'started', reason: null, runId: created?.runId ?? null };
}

/** The next firing; null (the schedule stops firing) for an expression that no longer parses. */
function safeNextTick(s: ScheduleRow, after: Date): Date | null {
  try {
    return nextTick(s.cron, s.timezone, after);
  } catch {
    return null;
  }
}

async function isLive(tx: EntityManager, runId: string): Promise<boolean> {
  const rows = await tx.execute<Row[]>(
    `select 1 from runs where id = ? and status in ('pending', 'running')`,
    [runId],
  );
  return rows.length > 0;
}
