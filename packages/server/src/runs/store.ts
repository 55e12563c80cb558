import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { emExecutor, type SqlExecutor } from '../db/sql.js';
import { currentTraceparent } from '../telemetry/tracing.js';
import { backoffSql, DEFAULT_RETRY_POLICY, type RetryPolicy } from './retry.js';
import {
  type RunEvent,
  type RunKind,
  type RunRecord,
  type RunStatus,
  TERMINAL_EVENT_TYPES,
} from './types.js';

export type Row = Record<string, unknown>;

/** Why a run whose worker died is executed again, or failed (docs/run-engine.md, "Retries"). */
export const WORKER_LOST_REASON = 'Worker lost: the run lease expired';

/** The ORM's entity manager (its transaction, if any) or the plain pool. */
const executor = (db: EntityManager | SqlExecutor): SqlExecutor =>
  'getConnection' in db ? emExecutor(db) : db;

export const ms = (n: number) => `${Math.max(0, Math.trunc(n))} milliseconds`;

export const toDate = (v: unknown) => (v == null ? null : v instanceof Date ? v : new Date(String(v)));
// pg parses jsonb itself; a jsonb string value arrives as a JS string.
export const json = (v: unknown) => v;

export function toRun(r: Row): RunRecord {
  return {
    id: r.id as string,
    workspaceId: r.workspace_id as string,
    kind: r.kind as RunKind,
    status: r.status as RunStatus,
    appId: (r.app_id as string) ?? null,
    sessionId: (r.session_id as string) ?? null,
    serialKey: (r.serial_key as string) ?? null,
    input: (json(r.input) as Record<string, unknown>) ?? {},
    state: (json(r.state) as Record<string, unknown>) ?? null,
    waiting: Boolean(r.waiting),
    leaseOwner: (r.lease_owner as string) ?? null,
    attempts: Number(r.attempts),
    maxAttempts: Number(r.max_attempts),
    lastSeq: Number(r.last_seq),
    error: (r.error as string) ?? null,
    notBefore: toDate(r.not_before),
    createdAt: toDate(r.created_at) as Date,
    startedAt: toDate(r.started_at),
    completedAt: toDate(r.completed_at),
    traceParent: (r.trace_parent as string) ?? null,
  };
}

export function toEvent(r: Row): RunEvent {
  return {
    runId: r.run_id as string,
    seq: Number(r.seq),
    type: r.type as string,
    payload: (json(r.payload) as Record<string, unknown>) ?? {},
    createdAt: toDate(r.created_at) as Date,
  };
}

export interface NewRun {
  id?: string;
  workspaceId: string;
  kind: RunKind;
  appId?: string | null;
  sessionId?: string | null;
  /** Runs sharing a serial key execute one at a time, oldest first (a session's turns). */
  serialKey?: string | null;
  input?: Record<string, unknown>;
  maxAttempts?: number;
}

/** A statement refused by a unique index (e.g. a second running run of one serial key). */
export const isUniqueViolation = (err: unknown): boolean =>
  (err as { code?: string })?.code === '23505' ||
  (err as Error)?.constructor?.name === 'UniqueConstraintViolationException';

/**
 * A statement PostgreSQL aborted to break a deadlock (40P01) or a serialization conflict
 * (40001): nothing of it was written, and running it again is the documented remedy.
 */
export const isTransientConflict = (err: unknown): boolean => {
  const code = (err as { code?: string })?.code;
  return code === '40P01' || code === '40001';
};

/**
 * Runs a one-statement transaction again (up to `attempts` times in all) when PostgreSQL
 * aborted it as a deadlock victim or for a serialization conflict; anything else is thrown.
 */
export async function retryTransient<T>(run: () => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (err) {
      if (attempt >= attempts || !isTransientConflict(err)) throw err;
    }
  }
}

export const runStore = {
  async insertRun(em: EntityManager, run: NewRun): Promise<RunRecord> {
    const rows = await em.execute<Row[]>(
      `insert into runs (id, workspace_id, kind, app_id, session_id, serial_key, input, max_attempts, trace_parent)
       values (?, ?, ?, ?, ?, ?, ?::jsonb, ?, ?) returning *`,
      [
        run.id ?? randomUUID(),
        run.workspaceId,
        run.kind,
        run.appId ?? null,
        run.sessionId ?? null,
        run.serialKey ?? null,
        JSON.stringify(run.input ?? {}),
        run.maxAttempts ?? 1,
        currentTraceparent(),
      ],
    );
    return toRun(rows[0] as Row);
  },

  async getRun(em: EntityManager, id: string): Promise<RunRecord | null> {
    const rows = await em.execute<Row[]>('select * from runs where id = ?', [id]);
    return rows[0] ? toRun(rows[0]) : null;
  },

  /**
   * Appends one event. Non-terminal events are appended only while the run is live, so a
   * late delta can never follow `run.cancelled`; returns null when the run has ended.
   */
  async appendEvent(
    em: EntityManager,
    runId: string,
    type: string,
    payload: Record<string, unknown>,
    opts: { terminal?: boolean } = {},
  ): Promise<RunEvent | null> {
    const live = opts.terminal ? '' : ` and status in ('pending', 'running')`;
    const rows = await em.execute<Row[]>(
      `with s as (update runs set last_seq = last_seq + 1, updated_at = now()
                  where id = ?${live} returning last_seq)
       insert into run_events (run_id, seq, type, payload)
       select ?, last_seq, ?, ?::jsonb from s returning *`,
      [runId, runId, type, JSON.stringify(payload)],
    );
    return rows[0] ? toEvent(rows[0]) : null;
  },

  async readEvents(em: EntityManager, runId: string, afterSeq: number, limit = 500): Promise<RunEvent[]> {
    const rows = await em.execute<Row[]>(
      'select * from run_events where run_id = ? and seq > ? order by seq limit ?',
      [runId, afterSeq, limit],
    );
    return rows.map(toEvent);
  },

  /**
   * Leases the oldest claimable run: pending, or running without a live lease and not waiting
   * on a tool call (a resumed run, one released for a retry or handed back at shutdown, or one
   * whose worker died). A run with a serial key waits while an older run of that key is live.
   * Retries wait (docs/run-engine.md, "Retries"): a released run until its `not_before`, a run
   * whose worker died until its lease expiry plus the backoff of its attempts; one whose worker
   * died on its last attempt is never claimed (the sweep fails it: `failExhausted`).
   * `attempts` counts executions that start afresh: a run resumed after a tool call continues
   * the same attempt.
   */
  async claim(
    em: EntityManager,
    owner: string,
    leaseMs: number,
    kinds: RunKind[],
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
  ): Promise<(RunRecord & { recovered: boolean }) | null> {
    if (kinds.length === 0) return null;
    const backoff = backoffSql(policy, 'r.attempts');
    const rows = await em
      .execute<Row[]>(
        `with c as (
         select id, lease_owner, status, not_before from runs r
         where r.kind in (${kinds.map(() => '?').join(', ')})
           and (r.status = 'pending' and (r.not_before is null or r.not_before <= now())
                or (r.status = 'running' and not r.waiting
                    and (r.lease_owner is null and (r.not_before is null or r.not_before <= now())
                         or r.lease_owner is not null and r.attempts < r.max_attempts
                            and r.lease_expires_at + ${backoff.sql} < now())))
           and (r.serial_key is null or not exists (
                 select 1 from runs o where o.serial_key = r.serial_key and o.id <> r.id
                   and (o.status = 'running' or (o.status = 'pending' and o.created_at < r.created_at))))
         order by r.created_at
         limit 1
         for update skip locked)
       update runs set status = 'running', lease_owner = ?,
         lease_expires_at = now() + ?::interval, heartbeat_at = now(),
         attempts = attempts + case when c.status = 'running' and c.lease_owner is null
                                     and c.not_before is null then 0 else 1 end,
         not_before = null,
         error = case when c.lease_owner is not null then ?::text else runs.error end,
         started_at = coalesce(started_at, now()), updated_at = now()
       from c where runs.id = c.id
       returning runs.*, c.lease_owner as previous_owner`,
        [...kinds, ...backoff.params, owner, ms(leaseMs), WORKER_LOST_REASON],
      )
      // Two workers racing for two runs of one serial key: the unique index refuses the second.
      .catch((err) => {
        if (isUniqueViolation(err)) return [] as Row[];
        throw err;
      });
    const row = rows[0];
    if (!row) return null;
    return { ...toRun(row), recovered: row.previous_owner != null };
  },

  /**
   * Releases a run this worker holds for another execution no earlier than `backoffMs` from
   * now (its executor failed without deciding the outcome), recording why. False when the
   * lease is no longer ours or the run ended (cancelled meanwhile).
   */
  async release(
    em: EntityManager,
    runId: string,
    owner: string,
    backoffMs: number,
    error: string | null,
  ): Promise<boolean> {
    const rows = await em.execute<Row[]>(
      `update runs set lease_owner = null, lease_expires_at = null, waiting = false,
         not_before = now() + ?::interval, error = coalesce(?::text, error), updated_at = now()
       where id = ? and lease_owner = ? and status = 'running' returning id`,
      [ms(backoffMs), error, runId, owner],
    );
    return rows.length > 0;
  },

  /**
   * Fails, in one statement, the runs whose worker died (lease expired) on their last attempt:
   * status, error, lease released, pending tool calls failed, `run.failed` appended after the
   * written log. Never executed again, not even briefly. Returns the runs failed.
   */
  async failExhausted(em: EntityManager, limit = 50): Promise<RunRecord[]> {
    const rows = await em.execute<Row[]>(
      `with x as (
         select id from runs
         where status = 'running' and not waiting and lease_owner is not null
           and lease_expires_at < now() and attempts >= max_attempts
         order by lease_expires_at limit ? for update skip locked
       ), upd as (
         update runs r set status = 'failed', completed_at = now(), updated_at = now(),
           error = case when r.max_attempts > 1
                        then ?::text || '; giving up after ' || r.attempts || ' attempts' else ?::text end,
           lease_owner = null, lease_expires_at = null, waiting = false, last_seq = r.last_seq + 1
         from x where r.id = x.id
         returning r.*
       ), tc as (
         update tool_calls set status = 'failed', error = 'Run failed', completed_at = now()
         where run_id in (select id from upd) and status = 'pending'
         returning 1
       ), ev as (
         insert into run_events (run_id, seq, type, payload)
         select id, last_seq, 'run.failed', jsonb_build_object('runId', id, 'error', error) from upd
         returning 1
       )
       select upd.*, (select count(*) from tc) as failed_calls, (select count(*) from ev) as written from upd`,
      [limit, WORKER_LOST_REASON, WORKER_LOST_REASON],
    );
    return rows.map(toRun);
  },

  /**
   * Extends a lease. Returns the run's status (`running`, or `cancelled` when a cancel is
   * waiting for this worker to write its terminal event), or null when the lease is lost.
   */
  async heartbeat(
    em: EntityManager,
    runId: string,
    owner: string,
    leaseMs: number,
  ): Promise<RunStatus | null> {
    const rows = await em.execute<Row[]>(
      `update runs set heartbeat_at = now(), lease_expires_at = now() + ?::interval
       where id = ? and lease_owner = ? and status in ('running', 'cancelled') returning status`,
      [ms(leaseMs), runId, owner],
    );
    return rows[0] ? (rows[0].status as RunStatus) : null;
  },

  /**
   * Writes buffered events of runs leased by `owner` in one statement (one transaction): one
   * multi-row insert, each run's `last_seq` raised to its highest sequence, and (server
   * database) one NOTIFY for the whole batch, delivered at commit. Events of a run whose
   * lease `owner` no longer holds are not written. Returns the status of every run written.
   */
  async writeEvents(
    em: EntityManager | SqlExecutor,
    owner: string,
    events: RunEvent[],
    notify?: { channel: string; payload: string },
  ): Promise<Map<string, RunStatus>> {
    if (events.length === 0) return new Map();
    const rows = await executor(em).execute<Row[]>(
      `with ev as (
         select * from jsonb_to_recordset(?::jsonb) as x(run_id uuid, seq integer, type text, payload jsonb)
       ), mx as (
         select run_id, max(seq) as seq from ev group by run_id
       ), upd as (
         update runs r set last_seq = greatest(r.last_seq, mx.seq), updated_at = now()
         from mx where r.id = mx.run_id and r.lease_owner = ?
         returning r.id, r.status
       ), ins as (
         insert into run_events (run_id, seq, type, payload)
         select ev.run_id, ev.seq, ev.type, ev.payload from ev join upd on upd.id = ev.run_id
         returning 1
       )${notify ? ', n as (select pg_notify(?, ?) as sent)' : ''}
       select upd.id, upd.status, (select count(*) from ins) as written${notify ? ', (select count(*) from n) as notified' : ''}
       from upd`,
      [
        JSON.stringify(
          events.map((e) => ({ run_id: e.runId, seq: e.seq, type: e.type, payload: e.payload })),
        ),
        owner,
        ...(notify ? [notify.channel, notify.payload] : []),
      ],
    );
    return new Map(rows.map((r) => [r.id as string, r.status as RunStatus]));
  },

  async checkpoint(em: EntityManager, runId: string, owner: string, state: Record<string, unknown>) {
    await em.execute(
      `update runs set state = ?::jsonb, updated_at = now()
       where id = ? and lease_owner = ? and status = 'running'`,
      [JSON.stringify(state), runId, owner],
    );
  },

  /**
   * Ends a run held by `owner` (or any run when owner is null) and appends its terminal
   * event in the same transaction, after `pending` (the worker's events not yet written).
   * Returns null when the run was no longer live.
   */
  async finish(
    em: EntityManager,
    runId: string,
    owner: string | null,
    status: 'completed' | 'failed' | 'cancelled',
    payload: Record<string, unknown>,
    error: string | null = null,
    pending: RunEvent[] = [],
    notify?: { channel: string; payload: string },
  ): Promise<RunEvent | null> {
    return em.transactional(async (tx) => {
      if (owner !== null && pending.length > 0) await runStore.writeEvents(tx, owner, pending);
      const ownerClause = owner === null ? '' : ' and lease_owner = ?';
      // A cancel through here ends a run no worker holds: a queued (`pending`) one. A running
      // run is cancelled with `cancel`, so its worker writes `run.cancelled` after its events.
      const statusClause =
        status !== 'cancelled'
          ? `status in ('pending', 'running')`
          : owner === null
            ? `status = 'pending'`
            : `status = 'running'`;
      const rows = await tx.execute<Row[]>(
        `update runs set status = ?, error = ?, completed_at = now(), updated_at = now(),
           lease_owner = null, lease_expires_at = null, waiting = false
         where id = ? and ${statusClause}${ownerClause} returning id`,
        owner === null ? [status, error, runId] : [status, error, runId, owner],
      );
      if (rows.length === 0) return null;
      await tx.execute(
        `update tool_calls set status = 'failed', error = ?, completed_at = now()
         where run_id = ? and status = 'pending'`,
        [`Run ${status}`, runId],
      );
      const ev = await runStore.appendEvent(
        tx,
        runId,
        `run.${status}`,
        { runId, ...payload },
        { terminal: true },
      );
      if (notify) await tx.execute('select pg_notify(?, ?)', [notify.channel, notify.payload]);
      return ev;
    });
  },

  /**
   * `finish` for the worker holding the lease, in ONE statement (decision 0021): its
   * unwritten events (written while `owner` holds the lease, whatever the status), and — when
   * the run is still live — the status, `last_seq`, the lease released, its pending tool calls
   * failed, the terminal event after the written ones (no NOTIFY: the caller's event writer
   * sends it, decision 0021). One statement is one transaction: the terminal event commits
   * with everything before it or not at all. `queued`: a run of the same serial key waits
   * (decision 0021). When the run was cancelled meanwhile (the lease kept for us) the events
   * are written and no terminal is returned (the caller writes `run.cancelled`); none either,
   * and `owned` false, when the lease is no longer ours (nothing of the run is written then).
   * `final`: the executor's own CTEs, written in the same statement (decision 0021; see `FinalWrites`):
   * `owned` there holds the run's id when the lease is ours.
   */
  async finishOwned(
    db: SqlExecutor,
    runId: string,
    owner: string,
    status: 'completed' | 'failed',
    payload: Record<string, unknown>,
    error: string | null,
    pending: RunEvent[],
    final?: { ctes: string; params: unknown[] },
  ): Promise<{ terminal: RunEvent | null; owned: boolean; queued: boolean }> {
    const live = `r.status in ('pending', 'running')`;
    const rows = await db.execute<Row[]>(
      `with ev as (
         select * from jsonb_to_recordset(?::jsonb) as x(run_id uuid, seq integer, type text, payload jsonb)
       ), upd as (
         update runs r set
           last_seq = greatest(r.last_seq, coalesce((select max(seq) from ev), 0))
                      + case when ${live} then 1 else 0 end,
           status = case when ${live} then ?::text else r.status end,
           error = case when ${live} then ?::text else r.error end,
           completed_at = case when ${live} then now() else r.completed_at end,
           lease_owner = case when ${live} then null else r.lease_owner end,
           lease_expires_at = case when ${live} then null else r.lease_expires_at end,
           waiting = case when ${live} then false else r.waiting end,
           updated_at = now()
         where r.id = ?::uuid and r.lease_owner = ?::text
         returning r.id, r.last_seq, r.lease_owner is null as ended, r.serial_key
       ), ins as (
         insert into run_events (run_id, seq, type, payload)
         select ev.run_id, ev.seq, ev.type, ev.payload from ev join upd on upd.id = ev.run_id
         returning 1
       ), tc as (
         update tool_calls set status = 'failed', error = ?::text, completed_at = now()
         where run_id in (select id from upd where ended) and status = 'pending'
         returning 1
       ), term as (
         insert into run_events (run_id, seq, type, payload)
         select upd.id, upd.last_seq, ?::text, ?::jsonb from upd where upd.ended
         returning run_id, seq, type, payload, created_at
       )${final?.ctes ? `, owned as (select id from upd), ${final.ctes}` : ''}
       select term.*, (select count(*) from upd) as owned_rows, (select count(*) from ins) as written,
         (select count(*) from tc) as failed_calls,
         exists (select 1 from runs o join upd on o.serial_key = upd.serial_key
                  where o.status = 'pending' and o.id <> upd.id) as queued
         from (select 1) one left join term on true`,
      [
        JSON.stringify(
          pending.map((e) => ({ run_id: e.runId, seq: e.seq, type: e.type, payload: e.payload })),
        ),
        status,
        error,
        runId,
        owner,
        `Run ${status}`,
        `run.${status}`,
        JSON.stringify({ runId, ...payload }),
        ...(final?.ctes ? final.params : []),
      ],
    );
    const r = rows[0] as Row;
    return {
      terminal: r.seq != null ? toEvent(r) : null,
      owned: Number(r.owned_rows) > 0,
      // PGlite answers booleans as 't'/'f' through some paths.
      queued: r.queued === true || r.queued === 't',
    };
  },

  /**
   * A cancel: the run becomes `cancelled` at once (nothing more is appended, its tool calls
   * fail). When a live worker holds it, the worker keeps its lease to write the events it has
   * already handed to readers and then `run.cancelled` (`finishCancel`), so the terminal event
   * is always the last; otherwise `run.cancelled` is appended here. Returns null when the run
   * was not running.
   */
  async cancel(
    em: EntityManager,
    runId: string,
  ): Promise<{ owner: string | null; event: RunEvent | null } | null> {
    return em.transactional(async (tx) => {
      const rows = await tx.execute<Row[]>(
        `update runs set status = 'cancelled', completed_at = now(), updated_at = now(), waiting = false,
           lease_owner = case when lease_expires_at > now() and not waiting then lease_owner end,
           lease_expires_at = case when lease_expires_at > now() and not waiting then lease_expires_at end
         where id = ? and status = 'running' returning lease_owner`,
        [runId],
      );
      if (rows.length === 0) return null;
      await tx.execute(
        `update tool_calls set status = 'failed', error = 'Run cancelled', completed_at = now()
         where run_id = ? and status = 'pending'`,
        [runId],
      );
      const owner = (rows[0]?.lease_owner as string) ?? null;
      if (owner) return { owner, event: null };
      const event = await runStore.appendEvent(tx, runId, 'run.cancelled', { runId }, { terminal: true });
      return { owner: null, event };
    });
  },

  /**
   * The worker side of a cancel: writes its pending events, then `run.cancelled`, and
   * releases the lease (owner null: the sweep's form for a worker that never did).
   */
  async finishCancel(
    em: EntityManager,
    runId: string,
    owner: string | null,
    pending: RunEvent[] = [],
    notify?: { channel: string; payload: string },
  ): Promise<RunEvent | null> {
    return em.transactional(async (tx) => {
      if (owner !== null && pending.length > 0) await runStore.writeEvents(tx, owner, pending);
      const rows = await tx.execute<Row[]>(
        `update runs set lease_owner = null, lease_expires_at = null, updated_at = now()
         where id = ? and status = 'cancelled' and lease_owner is not null
           ${owner === null ? 'and lease_expires_at < now()' : 'and lease_owner = ?'}
         returning id`,
        owner === null ? [runId] : [runId, owner],
      );
      if (rows.length === 0) return null;
      const ev = await runStore.appendEvent(tx, runId, 'run.cancelled', { runId }, { terminal: true });
      if (notify) await tx.execute('select pg_notify(?, ?)', [notify.channel, notify.payload]);
      return ev;
    });
  },

  /** Cancelled runs whose worker died before writing `run.cancelled` (the sweep ends them). */
  async abandonedCancels(em: EntityManager): Promise<string[]> {
    const rows = await em.execute<Row[]>(
      `select id from runs where status = 'cancelled' and lease_owner is not null
         and lease_expires_at < now() limit 50`,
    );
    return rows.map((r) => r.id as string);
  },

  /**
   * The log after `afterSeq` and the run's status in one statement (status null: no such
   * run), and — when the run has ended — its terminal event if that lies at or behind
   * `afterSeq` (`behind`: a reader handed events from memory that were never written, by a
   * worker that crashed or lost its lease, ends with it). One statement is one snapshot: a
   * terminal event committed after the log was read cannot be returned without the events
   * before it (two statements could, skipping them).
   */
  async readLog(
    em: EntityManager,
    runId: string,
    afterSeq: number,
    limit = 500,
  ): Promise<{ status: RunStatus | null; events: RunEvent[]; behind: RunEvent | null }> {
    const rows = await em.execute<Row[]>(
      // The status guard spares a live run's read the backward scan for a terminal event.
      `with r as (select id, status from runs where id = ?),
       t as (
         select e.* from run_events e join r on e.run_id = r.id
         where r.status in ('completed', 'failed', 'cancelled') and e.seq <= ?
           and e.type in (${TERMINAL_EVENT_TYPES.map(() => '?').join(', ')})
         order by e.seq desc limit 1
       )
       select r.status as run_status, (select to_jsonb(t) from t) as behind, e.* from r
       left join lateral (select * from run_events where run_id = r.id and seq > ? order by seq limit ?) e on true`,
      [runId, afterSeq, ...TERMINAL_EVENT_TYPES, afterSeq, limit],
    );
    if (rows.length === 0) return { status: null, events: [], behind: null };
    const behind = json(rows[0]?.behind) as Row | null;
    return {
      status: rows[0]?.run_status as RunStatus,
      events: rows.filter((r) => r.seq != null).map(toEvent),
      behind: behind ? toEvent(behind) : null,
    };
  },

  /** Releases the lease of a run that now waits on tool calls. */
  async park(em: EntityManager, runId: string, owner: string): Promise<boolean> {
    const rows = await em.execute<Row[]>(
      `update runs set waiting = true, lease_owner = null, lease_expires_at = null, updated_at = now()
       where id = ? and lease_owner = ? and status = 'running' returning id`,
      [runId, owner],
    );
    return rows.length > 0;
  },

  /** Makes a waiting run claimable again once none of its tool calls is pending. */
  async unpark(em: EntityManager, runId: string): Promise<boolean> {
    const rows = await em.execute<Row[]>(
      `update runs set waiting = false, updated_at = now()
       where id = ? and status = 'running' and waiting
         and not exists (select 1 from tool_calls where run_id = ? and status = 'pending')
       returning id`,
      [runId, runId],
    );
    return rows.length > 0;
  },
};
