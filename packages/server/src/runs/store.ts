import { randomBytes, randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { ACTIVE_API_KEY_WHERE, API_KEY_FROM, TOUCH_API_KEY_CTE } from '../auth/api-keys.js';
import { emExecutor, type SqlExecutor } from '../db/sql.js';
import { rateLimitCte, rateLimitCteParams, shardedRateLimit } from '../metering/service.js';
import { backoffSql, DEFAULT_RETRY_POLICY, type RetryPolicy } from './retry.js';
import {
  type RunEvent,
  type RunKind,
  type RunRecord,
  type RunStatus,
  TERMINAL_EVENT_TYPES,
  type ToolCallRecord,
} from './types.js';

type Row = Record<string, unknown>;

/** Why a run whose worker died is executed again, or failed (docs/run-engine.md, "Retries"). */
export const WORKER_LOST_REASON = 'Worker lost: the run lease expired';

/** The ORM's entity manager (its transaction, if any) or the plain pool. */
const executor = (db: EntityManager | SqlExecutor): SqlExecutor =>
  'getConnection' in db ? emExecutor(db) : db;

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
    notBefore: toDate(r.not_before),
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
    kind: (r.kind as ToolCallRecord['kind']) ?? 'result',
    status: r.status as ToolCallRecord['status'],
    result: json(r.result),
    inputSchema: (json(r.input_schema) as Record<string, unknown> | null) ?? null,
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

export interface TurnAdmission {
  /** The session was not found in the workspace. */
  missing: boolean;
  /** The oldest live turn of the session, when the turn was refused (`reject`). */
  activeRunId: string | null;
  run: RunRecord | null;
  /** The `apps` row of the session's agent. */
  agent: Row | null;
}

/** The SQL of the run engine. Every statement goes through `em.execute` (see AGENTS rules). */
/**
 * The CTEs of a turn's admission (`s`, `act`, `ok`, `msg`, `touched`, `run`): session lookup
 * in the workspace `ws` (an expression; its parameters `wsParams` are repeated where it is
 * used), the concurrency check, the user message, the session touched, and the run — leased
 * when `claimFor` is given and no other turn of the session is live.
 */
function turnAdmissionSql(
  ws: string,
  wsParams: unknown[],
  t: {
    runId: string;
    messageId: string;
    sessionId: string;
    message: string;
    input: Record<string, unknown>;
    reject: boolean;
    claimFor: { owner: string; leaseMs: number } | null;
  },
  /** The run's input: `?::jsonb` (the `input` parameter), or an expression around it. */
  inputSql = '?::jsonb',
): { ctes: string; params: unknown[] } {
  const claim = t.claimFor !== null;
  return {
    ctes: `s as (
         select id, app_id from agent_sessions where id = ?::uuid and workspace_id = ${ws}
       ), act as (
         select r.id from runs r join s on r.session_id = s.id
         where r.kind = 'turn' and r.status in ('pending', 'running') order by r.created_at limit 1
       ), ok as (
         select s.id, s.app_id, not exists (select 1 from act) as free from s
         where not ?::boolean or not exists (select 1 from act)
       ), msg as (
         insert into session_messages (id, workspace_id, session_id, run_id, role, content, metadata)
         select ?::uuid, ${ws}, ok.id, ?::uuid, 'user', ?::text, '{}'::jsonb from ok returning id
       ), touched as (
         update agent_sessions set last_message_at = now() where id in (select id from ok) returning id
       ), run as (
         insert into runs (id, workspace_id, kind, app_id, session_id, serial_key, input, max_attempts,
           status, lease_owner, lease_expires_at, heartbeat_at, attempts, started_at)
         select ?::uuid, ${ws}, 'turn', ok.app_id, ok.id, 'session:' || ok.id, ${inputSql}, 1,
           case when ok.free and ?::boolean then 'running' else 'pending' end,
           case when ok.free and ?::boolean then ?::text end,
           case when ok.free and ?::boolean then now() + ?::interval end,
           case when ok.free and ?::boolean then now() end,
           case when ok.free and ?::boolean then 1 else 0 end,
           case when ok.free and ?::boolean then now() end
         from ok returning *
       )`,
    params: [
      t.sessionId,
      ...wsParams,
      t.reject,
      t.messageId,
      ...wsParams,
      t.runId,
      t.message,
      t.runId,
      ...wsParams,
      JSON.stringify(t.input),
      claim,
      claim,
      t.claimFor?.owner ?? null,
      claim,
      ms(t.claimFor?.leaseMs ?? 0),
      claim,
      claim,
      claim,
    ],
  };
}

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

  /**
   * Admits an agent turn in ONE statement: finds the session (in the workspace) and its
   * agent, looks for a live turn of the session (refused under `reject`), stores the user
   * message, touches the session and inserts the run — already leased by `claimFor` when the
   * admitting process has a free turn slot and no other turn of the session is live (so no
   * wake-up and no claim round trip). Two concurrent admissions cannot both start a turn: the
   * unique index on running serial keys refuses the second (the caller retries).
   */
  async admitTurn(
    em: EntityManager,
    t: {
      runId: string;
      messageId: string;
      workspaceId: string;
      sessionId: string;
      message: string;
      input: Record<string, unknown>;
      reject: boolean;
      claimFor: { owner: string; leaseMs: number } | null;
    },
  ): Promise<TurnAdmission> {
    const q = turnAdmissionSql('?', [t.workspaceId], t);
    const rows = await em.execute<Row[]>(
      `with ${q.ctes}
       select (select count(*) from s) as found, (select id from act) as active_run_id,
         (select count(*) from msg) + (select count(*) from touched) as written,
         (select row_to_json(a) from apps a join s on a.id = s.app_id where a.app_type = 'agent') as agent,
         run.*
       from (select 1) one left join run on true`,
      q.params,
    );
    const r = rows[0] as Row;
    const agent = (typeof r.agent === 'string' ? JSON.parse(r.agent) : r.agent) as Row | null;
    return {
      missing: Number(r.found) === 0,
      activeRunId: r.id == null ? ((r.active_run_id as string) ?? null) : null,
      run: r.id == null ? null : toRun(r),
      agent,
    };
  },

  /**
   * `admitTurn` preceded by the request's own checks, in ONE statement on the plain pool
   * (decision 0029): the API key (an active key of an active workspace; `last_used_at`
   * refreshed at most once a minute), a unit of the workspace's `agent_message` rate limit
   * (only when `admit`: a valid request), and the credit check (balance above zero). The turn
   * is admitted only when all three pass. Undefined when the key does not resolve (401); the
   * caller then checks, in this order, `hits` against the rule (429), `balanceMicros` (402),
   * then the admission as `admitTurn`'s.
   */
  async admitKeyTurn(
    db: SqlExecutor,
    t: {
      keyHash: string;
      admit: boolean;
      rate: { limited: boolean; limit: number; windowSeconds: number };
      runId: string;
      messageId: string;
      sessionId: string;
      message: string;
      input: Record<string, unknown>;
      reject: boolean;
      claimFor: { owner: string; leaseMs: number } | null;
      /**
       * The first model call's credit hold (`Metering.holdInStatement`), taken only when the
       * run is admitted leased here and its agent is still the row the guess was made from
       * (decision 0029).
       */
      hold?: { ctes: string; params: unknown[]; agentId: string; agentUpdatedAt: string };
    },
  ): Promise<
    | (TurnAdmission & {
        key: { id: string; name: string | null; workspace_id: string; workspace_name: string };
        balanceMicros: number;
        hits: number | null;
        resetIn: number | null;
        /** The hold the statement took (undefined: none tried or refused). */
        held?: { micros: number; inputTokens: number };
      })
    | undefined
  > {
    const w = t.rate.windowSeconds;
    const sharded = shardedRateLimit(t.rate.limited, t.rate.limit);
    // The run records the key it was started with (usage records name it).
    const q = turnAdmissionSql(
      '(select workspace_id from go)',
      [],
      t,
      `?::jsonb || jsonb_build_object('apiKeyId', (select id from k))`,
    );
    const rows = await db.execute<Row[]>(
      `with async_commit as (select set_config('synchronous_commit', 'off', true) as v), k as (
         select k.id, k.name, k.workspace_id, w.name as workspace_name, w.credit_balance_micros as balance
           from ${API_KEY_FROM} cross join async_commit
          where ${ACTIVE_API_KEY_WHERE}
       ), ${TOUCH_API_KEY_CTE}, ${rateLimitCte('?::boolean', sharded)}, go as (
         select k.workspace_id from k
          where ?::boolean and k.balance > 0
            and (not ?::boolean or coalesce((select hits from rl), 0) <= ?::int)
       ), ${q.ctes}${
         t.hold && t.claimFor
           ? `, hold_src as (
         select run.workspace_id, 0::bigint as extra_chars,
                jsonb_build_object('workspaceId', run.workspace_id, 'apiKeyId', (select id from k),
                                   'sessionId', run.session_id) as usage_patch
           from run join apps a on a.id = run.app_id
          where run.status = 'running' and run.lease_owner = ?::text
            and a.id = ?::uuid and a.updated_at = ?::timestamptz
       ), ${t.hold.ctes}`
           : ''
       }
       select k.id as key_id, k.name as key_name, k.workspace_id as key_workspace_id,
         k.workspace_name as key_workspace_name, k.balance, rl.hits, rl.reset_in,
         (select count(*) from s) as found, (select id from act) as active_run_id,
         (select row_to_json(a) from apps a join s on a.id = s.app_id where a.app_type = 'agent') as agent,
         (select row_to_json(run) from run) as run_row${
           t.hold && t.claimFor
             ? ', (select held from hold_upd) as hold_held, (select tokens from hold_upd) as hold_tokens'
             : ''
         }
       from k left join rl on true`,
      [
        t.keyHash,
        // No unit taken (no row written, no row lock shared by the workspace's turns) when the
        // bucket has no limit, as `metering.rateLimit` does.
        ...rateLimitCteParams('agent_message:', w, sharded, [t.admit && t.rate.limited]),
        t.admit,
        t.rate.limited,
        t.rate.limit,
        ...q.params,
        ...(t.hold && t.claimFor
          ? [t.claimFor.owner, t.hold.agentId, t.hold.agentUpdatedAt, ...t.hold.params]
          : []),
      ],
    );
    const r = rows[0];
    if (!r) return undefined;
    const parse = (v: unknown) => (typeof v === 'string' ? JSON.parse(v) : v) as Row | null;
    const run = parse(r.run_row);
    return {
      key: {
        id: r.key_id as string,
        name: (r.key_name as string | null) ?? null,
        workspace_id: r.key_workspace_id as string,
        workspace_name: (r.key_workspace_name as string) ?? '',
      },
      balanceMicros: Number(r.balance),
      hits: r.hits == null ? null : Number(r.hits),
      resetIn: r.reset_in == null ? null : Number(r.reset_in),
      missing: Number(r.found) === 0,
      activeRunId: run ? null : ((r.active_run_id as string) ?? null),
      run: run ? toRun(run) : null,
      agent: parse(r.agent),
      held:
        r.hold_held == null ? undefined : { micros: Number(r.hold_held), inputTokens: Number(r.hold_tokens) },
    };
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
      kind?: ToolCallRecord['kind'];
      inputSchema?: Record<string, unknown> | null;
    },
  ): Promise<ToolCallRecord> {
    const rows = await em.execute<Row[]>(
      `insert into tool_calls (id, run_id, workspace_id, session_id, model_call_id, name, arguments, deadline_at,
         kind, input_schema)
       values (?, ?, ?, ?, ?, ?, ?::jsonb, now() + ?::interval, ?, ?::jsonb) returning *`,
      [
        `call_${randomBytes(12).toString('hex')}`,
        call.runId,
        call.workspaceId,
        call.sessionId,
        call.modelCallId,
        call.name,
        JSON.stringify(call.arguments ?? {}),
        ms(call.deadlineMs),
        call.kind ?? 'result',
        call.inputSchema ? JSON.stringify(call.inputSchema) : null,
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

  /**
   * Decides a pending approval call once, before its deadline; null when it is not pending
   * any more or its deadline has passed.
   */
  async decideToolCall(
    em: EntityManager,
    id: string,
    decision: { approved: true; arguments: unknown } | { approved: false; reason: string | null },
  ): Promise<ToolCallRecord | null> {
    const rows = await em.execute<Row[]>(
      `update tool_calls set status = ?, result = ?::jsonb, error = ?, completed_at = now()
       where id = ? and kind = 'approval' and status = 'pending' and deadline_at > now() returning *`,
      decision.approved
        ? ['approved', JSON.stringify({ arguments: decision.arguments ?? {} }), null, id]
        : ['denied', null, decision.reason, id],
    );
    return rows[0] ? toToolCall(rows[0]) : null;
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
      `select t.id from tool_calls t join runs r on r.id = t.run_id
       where t.status = 'pending' and t.deadline_at < now() and r.waiting limit 100`,
    );
    return rows.map((r) => r.id as string);
  },
};
