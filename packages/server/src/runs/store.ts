import { randomBytes, randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { RunEvent, RunKind, RunRecord, RunStatus, ToolCallRecord } from './types.js';

type Row = Record<string, unknown>;

const ms = (n: number) => `${Math.max(0, Math.trunc(n))} milliseconds`;

const toDate = (v: unknown) => (v == null ? null : v instanceof Date ? v : new Date(String(v)));
// pg parses jsonb itself; a jsonb string value arrives as a JS string.
const json = (v: unknown) => v;

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
    createdAt: toDate(r.created_at) as Date,
    startedAt: toDate(r.started_at),
    completedAt: toDate(r.completed_at),
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

export function toToolCall(r: Row): ToolCallRecord {
  return {
    id: r.id as string,
    runId: r.run_id as string,
    workspaceId: r.workspace_id as string,
    sessionId: (r.session_id as string) ?? null,
    modelCallId: r.model_call_id as string,
    name: r.name as string,
    arguments: json(r.arguments),
    status: r.status as ToolCallRecord['status'],
    result: json(r.result),
    error: (r.error as string) ?? null,
    deadlineAt: toDate(r.deadline_at) as Date,
    createdAt: toDate(r.created_at) as Date,
    completedAt: toDate(r.completed_at),
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

/** The SQL of the run engine. Every statement goes through `em.execute` (see AGENTS rules). */
export const runStore = {
  async insertRun(em: EntityManager, run: NewRun): Promise<RunRecord> {
    const rows = await em.execute<Row[]>(
      `insert into runs (id, workspace_id, kind, app_id, session_id, serial_key, input, max_attempts)
       values (?, ?, ?, ?, ?, ?, ?::jsonb, ?) returning *`,
      [
        run.id ?? randomUUID(),
        run.workspaceId,
        run.kind,
        run.appId ?? null,
        run.sessionId ?? null,
        run.serialKey ?? null,
        JSON.stringify(run.input ?? {}),
        run.maxAttempts ?? 1,
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
   * Leases the oldest claimable run: pending, or running without a live lease and not
   * waiting on a tool call (a resumed run, or one whose worker died). A run with a serial
   * key waits while an older run of that key is live.
   */
  async claim(
    em: EntityManager,
    owner: string,
    leaseMs: number,
    kinds: RunKind[],
  ): Promise<(RunRecord & { recovered: boolean }) | null> {
    if (kinds.length === 0) return null;
    const rows = await em.execute<Row[]>(
      `with c as (
         select id, lease_owner from runs r
         where r.kind in (${kinds.map(() => '?').join(', ')})
           and (r.status = 'pending'
                or (r.status = 'running' and not r.waiting
                    and (r.lease_owner is null or r.lease_expires_at < now())))
           and (r.serial_key is null or not exists (
                 select 1 from runs o where o.serial_key = r.serial_key and o.id <> r.id
                   and (o.status = 'running' or (o.status = 'pending' and o.created_at < r.created_at))))
         order by r.created_at
         limit 1
         for update skip locked)
       update runs set status = 'running', lease_owner = ?,
         lease_expires_at = now() + ?::interval, heartbeat_at = now(),
         attempts = attempts + 1, started_at = coalesce(started_at, now()), updated_at = now()
       from c where runs.id = c.id
       returning runs.*, c.lease_owner as previous_owner`,
      [...kinds, owner, ms(leaseMs)],
    );
    const row = rows[0];
    if (!row) return null;
    return { ...toRun(row), recovered: row.previous_owner != null };
  },

  async heartbeat(em: EntityManager, runId: string, owner: string, leaseMs: number): Promise<boolean> {
    const rows = await em.execute<Row[]>(
      `update runs set heartbeat_at = now(), lease_expires_at = now() + ?::interval
       where id = ? and lease_owner = ? and status = 'running' returning id`,
      [ms(leaseMs), runId, owner],
    );
    return rows.length > 0;
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
   * event in the same transaction. Returns false when the run was no longer live.
   */
  async finish(
    em: EntityManager,
    runId: string,
    owner: string | null,
    status: 'completed' | 'failed' | 'cancelled',
    payload: Record<string, unknown>,
    error: string | null = null,
  ): Promise<RunEvent | null> {
    return em.transactional(async (tx) => {
      const ownerClause = owner === null ? '' : ' and lease_owner = ?';
      const statusClause = status === 'cancelled' ? `status = 'running'` : `status in ('pending', 'running')`;
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
      return runStore.appendEvent(tx, runId, `run.${status}`, { runId, ...payload }, { terminal: true });
    });
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

  /** Runs whose worker died and that have used all their attempts: to be failed. */
  async exhaustedLeases(em: EntityManager): Promise<string[]> {
    const rows = await em.execute<Row[]>(
      `select id from runs where status = 'running' and not waiting and lease_owner is not null
         and lease_expires_at < now() and attempts >= max_attempts limit 50`,
    );
    return rows.map((r) => r.id as string);
  },

  async insertToolCall(
    em: EntityManager,
    call: {
      runId: string;
      workspaceId: string;
      sessionId: string | null;
      modelCallId: string;
      name: string;
      arguments: unknown;
      deadlineMs: number;
    },
  ): Promise<ToolCallRecord> {
    const rows = await em.execute<Row[]>(
      `insert into tool_calls (id, run_id, workspace_id, session_id, model_call_id, name, arguments, deadline_at)
       values (?, ?, ?, ?, ?, ?, ?::jsonb, now() + ?::interval) returning *`,
      [
        `call_${randomBytes(12).toString('hex')}`,
        call.runId,
        call.workspaceId,
        call.sessionId,
        call.modelCallId,
        call.name,
        JSON.stringify(call.arguments ?? {}),
        ms(call.deadlineMs),
      ],
    );
    return toToolCall(rows[0] as Row);
  },

  async getToolCall(em: EntityManager, id: string): Promise<ToolCallRecord | null> {
    const rows = await em.execute<Row[]>('select * from tool_calls where id = ?', [id]);
    return rows[0] ? toToolCall(rows[0]) : null;
  },

  async toolCallsOfRun(em: EntityManager, runId: string): Promise<ToolCallRecord[]> {
    const rows = await em.execute<Row[]>(
      'select * from tool_calls where run_id = ? order by created_at, id',
      [runId],
    );
    return rows.map(toToolCall);
  },

  /** Settles a pending call once; a second settle finds nothing and returns null. */
  async settleToolCall(
    em: EntityManager,
    id: string,
    outcome: { result: unknown } | { error: string; expired?: boolean },
  ): Promise<ToolCallRecord | null> {
    const isError = 'error' in outcome;
    const status = isError ? (outcome.expired ? 'expired' : 'failed') : 'completed';
    const rows = await em.execute<Row[]>(
      `update tool_calls set status = ?, result = ?::jsonb, error = ?, completed_at = now()
       where id = ? and status = 'pending' returning *`,
      [status, isError ? null : JSON.stringify(outcome.result ?? null), isError ? outcome.error : null, id],
    );
    return rows[0] ? toToolCall(rows[0]) : null;
  },

  async overdueToolCalls(em: EntityManager): Promise<string[]> {
    const rows = await em.execute<Row[]>(
      `select id from tool_calls where status = 'pending' and deadline_at < now() limit 100`,
    );
    return rows.map((r) => r.id as string);
  },
};
