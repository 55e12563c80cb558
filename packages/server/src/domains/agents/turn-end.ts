import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { SqlExecutor } from '../../db/sql.js';
import type { GenerationMeter } from '../../metering/types.js';
import type { FinalWrites, RunExecution } from '../../runs/index.js';

/**
 * The end of a turn that answered (decisions 0021 and 0029): the assistant message (with the
 * session's `last_message_at`) and its `message.completed` event are written by the statement
 * that ends the run, only while the lease is ours (`owned`). The model call's settlement and
 * its usage record are one statement of their own beside it, in parallel (whatever happened to
 * the run): folded into the end statement, the workspace's balance row would stay locked
 * through that statement's NOTIFY-serialised commit, and every turn's hold waits on that row.
 */
export function turnFinalWrites(
  run: RunExecution['run'],
  text: string,
  meter: GenerationMeter | undefined,
  db: SqlExecutor,
  log: Logger,
): FinalWrites {
  const messageId = randomUUID();
  const ctes: string[] = [];
  const params: unknown[] = [];
  if (text && run.sessionId) {
    ctes.push(`fmsg as (
       insert into session_messages (id, workspace_id, session_id, run_id, role, content, metadata)
       select ?::uuid, ?::uuid, ?::uuid, owned.id, 'assistant', ?::text, '{}'::jsonb from owned
       returning session_id
     ), ftouch as (
       update agent_sessions set last_message_at = now() where id in (select session_id from fmsg)
     )`);
    params.push(messageId, run.workspaceId, run.sessionId, text);
  }
  return {
    events: text ? [{ type: 'message.completed', payload: { runId: run.id, messageId, content: text } }] : [],
    ctes: ctes.join(', '),
    params,
    beside: () =>
      settleTurnCall(meter, db).catch((err) =>
        log.error({ err, runId: run.id }, 'recording agent usage failed'),
      ),
  };
}

/** A model call's settlement and usage record in one statement (`finish` when that cannot be). */
async function settleTurnCall(meter: GenerationMeter | undefined, db: SqlExecutor): Promise<void> {
  const stl = meter?.settlementInStatement('success');
  if (!stl) {
    await meter?.finish('success');
    return;
  }
  let rows: { stl_delta: unknown; stl_change: unknown }[];
  try {
    rows = await db.execute(
      // Committed without waiting for the WAL flush (like the admission): the workspace's balance
      // row, locked by every turn's hold and settlement, is released at once. A settlement lost
      // in a database crash leaves its hold, which the sweep settles as a dead process's.
      `with async_commit as (select set_config('synchronous_commit', 'off', true) as v), ${stl.ctes}
       select ${stl.columns} from async_commit`,
      stl.params,
    );
  } catch (err) {
    // Nothing was written: settle the usual way.
    stl.failed();
    await meter?.finish('success');
    throw err;
  }
  stl.committed(rows[0] ?? { stl_delta: null, stl_change: null });
}
