import type { Logger } from 'pino';
import type { SqlExecutor } from '../../db/sql.js';
import type { GenerationMeter } from '../../metering/types.js';

/**
 * A turn's memory, after the model answered (or failed): the thread (created for a new
 * conversation, else its identity metadata and session merged in), its counter bumped, and
 * the user message and the reply (when there is one) numbered after it. `from`: what the
 * thread's upsert selects from (the settlement's `stl_done`, one row once the balance row is
 * written, so the workspace is locked before the thread, or nothing).
 */
const saveTurnCtes = (from: string) => `th as (
    insert into app_threads as t (id, workspace_id, app_id, session_id, metadata, message_count)
    select ?::uuid, ?::uuid, ?::uuid, ?, ?::jsonb, ?::int${from}
    on conflict (id) do update set
      metadata = t.metadata || excluded.metadata,
      session_id = coalesce(t.session_id, excluded.session_id),
      message_count = t.message_count + excluded.message_count,
      updated_at = now()
    returning id, workspace_id, app_id, message_count
  ), ins as (
    insert into app_thread_messages
      (id, workspace_id, app_id, thread_id, role, content, sequence_number, request_id, turn_id,
       provider_status, error_code, latency_ms, input_tokens, output_tokens, cost_micros, metadata)
    select gen_random_uuid(), th.workspace_id, th.app_id, th.id, m.role, m.content,
           th.message_count - ?::int + m.ord, ?, ?, m.provider_status, m.error_code, m.latency_ms,
           m.input_tokens, m.output_tokens, m.cost_micros, m.metadata
      from th, jsonb_to_recordset(?::jsonb) as m(ord int, role text, content text, provider_status text,
           error_code text, latency_ms int, input_tokens int, output_tokens int, cost_micros bigint,
           metadata jsonb)
  )`;

/** The memory alone (a meter that cannot settle in the statement). */
const SAVE_TURN_SQL = `with ${saveTurnCtes('')} select id from th`;

/**
 * The settlement's CTEs (first: they write the workspace's balance row), then the memory, whose
 * thread upsert selects from `stl_done`, after that row. One text per settlement text (a constant)
 * and commit mode: `asyncCommit` commits with `synchronous_commit` off, so the workspace's
 * balance row is released at commit instead of after the WAL flush (the caller then waits for
 * the database's `durable()` before it answers; decision 0032).
 */
const END_TURN = new Map<string, string>();
const END_TURN_SQL = (settlement: string, columns: string, asyncCommit: boolean) => {
  const key = `${asyncCommit}:${settlement}`;
  let sql = END_TURN.get(key);
  if (!sql) {
    sql = asyncCommit
      ? `with end_async as (select set_config('synchronous_commit', 'off', true) as v), ${settlement}, ${saveTurnCtes(' from stl_done')} select ${columns}, (select id from th) as thread_id, (select v from end_async) as end_async`
      : `with ${settlement}, ${saveTurnCtes(' from stl_done')} select ${columns}, (select id from th) as thread_id`;
    END_TURN.set(key, sql);
  }
  return sql;
};

export interface TurnMessage {
  role: 'user' | 'assistant';
  content: string;
  providerStatus: string;
  errorCode?: string;
  latencyMs?: number;
  inputTokens?: number;
  outputTokens?: number;
  costMicros?: number;
  metadata: Record<string, unknown>;
}

/** What the end of a turn writes besides its messages (a `PreparedTurn`). */
export interface EndingTurn {
  principal: { workspaceId: string };
  app: { id: string };
  threadId: string;
  identity: Record<string, string>;
  sessionId: string | null;
  turnId: string;
  meter: GenerationMeter;
}

/**
 * The end of a turn in ONE statement (one transaction): the settlement of the hold with its
 * usage record (`settlementInStatement`) and the memory (`saveTurnCtes`: the thread and the
 * turn's messages), on disk before `done`/`error` is sent (on the server: committed without
 * the flush, then a shared barrier; decision 0032). If it fails,
 * neither is written: the hold is then settled on its own (`finish`) and the error goes on.
 * A meter that cannot settle in a statement writes the memory and settles side by side.
 */
export async function endTurn(
  deps: { db: SqlExecutor; log: Logger },
  requestId: string,
  turn: EndingTurn,
  messages: TurnMessage[],
  status: 'success' | 'error' | 'aborted',
): Promise<void> {
  const rows = messages.map((m, i) => ({
    ord: i + 1,
    role: m.role,
    content: m.content,
    provider_status: m.providerStatus,
    error_code: m.errorCode ?? null,
    latency_ms: Math.max(0, Math.round(m.latencyMs ?? 0)),
    input_tokens: m.inputTokens ?? 0,
    output_tokens: m.outputTokens ?? 0,
    cost_micros: m.costMicros ?? 0,
    metadata: m.metadata,
  }));
  const save = [
    turn.threadId,
    turn.principal.workspaceId,
    turn.app.id,
    turn.sessionId,
    JSON.stringify(turn.identity),
    rows.length,
    rows.length,
    requestId,
    turn.turnId,
    JSON.stringify(rows),
  ];
  const stl = turn.meter.settlementInStatement(status);
  if (!stl) {
    await Promise.all([deps.db.execute(SAVE_TURN_SQL, save), turn.meter.finish(status)]);
    return;
  }
  // On the PostgreSQL server the statement commits without waiting for the WAL flush (the
  // balance row every turn of the workspace updates is released at once), and the turn waits
  // for a shared flush before its `done` or `error` (decision 0032).
  const durable = deps.db.durable;
  let result: { stl_delta: unknown; stl_change: unknown }[];
  try {
    result = await deps.db.execute(END_TURN_SQL(stl.ctes, stl.columns, durable !== undefined), [
      ...stl.params,
      ...save,
    ]);
  } catch (err) {
    stl.failed();
    await turn.meter
      .finish(status)
      .catch((e) => deps.log.error({ err: e }, 'app chat: could not settle the turn'));
    throw err;
  }
  stl.committed(result[0] ?? { stl_delta: null, stl_change: null });
  // Committed and visible; on disk once a barrier sent after it answered. If none can be
  // confirmed (the database went away), the turn's outcome is unknown to this process, as
  // for a commit whose answer is lost: it ends with an error, not `done`, and is not settled
  // again here (if that commit was lost, its hold row is back and, no longer extended by
  // this process since `settlementInStatement`, is settled by the sweep once its lease ends).
  // Logged once, by the caller: the stream's route, the REST handler (sync), or `fail`'s catch.
  if (durable) await durable();
}
