import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { ServerDeps } from '../../context.js';
import { runStore } from '../../runs/index.js';

type Row = Record<string, unknown>;

/** What one autonomous run is made of, as written by `insertAutonomousRun`. */
export interface NewAutonomousRun {
  workspaceId: string;
  agentId: string;
  task: string;
  /** An existing session of the agent (checked by the caller); a new one when omitted. */
  sessionId?: string;
  /** Stored on the run and, for a new session, on the session. */
  metadata: Record<string, unknown>;
  /** Idempotency key (`metadata.messageId`): a taken key inserts nothing and returns null. */
  messageId?: string | null;
  webhookUrl?: string | null;
  /** The session's `origin_source` (default `metadata.source`, else `api`). */
  source?: string;
  /** The schedule that started the run (docs/agents.md, "Schedules"). */
  scheduleId?: string | null;
  apiKeyId: string | null;
  requestId: string;
}

export interface AutonomousRunCreated {
  runId: string;
  sessionId: string;
  createdAt: Date;
}

/**
 * Writes an autonomous run inside the caller's transaction `tx`: the idempotency claim
 * (`autonomous_runs`), the session when new, the task as its user message, and the `runs` row
 * the engine executes. Returns null when `messageId` is already taken for the agent (a
 * concurrent insert with the same key waits on the unique index until the other transaction
 * ends). The caller wakes the workers (`deps.runs.bus`) once `tx` has committed.
 */
export async function insertAutonomousRun(
  tx: EntityManager,
  deps: ServerDeps,
  run: NewAutonomousRun,
): Promise<AutonomousRunCreated | null> {
  const runId = randomUUID();
  const sessionId = run.sessionId ?? randomUUID();
  const claimed = await tx.execute<Row[]>(
    `insert into autonomous_runs (run_id, workspace_id, app_id, session_id, task, message_id, metadata,
       webhook_url, webhook_status, schedule_id)
     values (?, ?, ?, ?, ?, ?, ?::jsonb, ?, ?, ?)
     on conflict (app_id, message_id) where message_id is not null do nothing
     returning run_id`,
    [
      runId,
      run.workspaceId,
      run.agentId,
      sessionId,
      run.task,
      run.messageId ?? null,
      JSON.stringify(run.metadata),
      run.webhookUrl ?? null,
      run.webhookUrl ? 'pending' : 'none',
      run.scheduleId ?? null,
    ],
  );
  if (claimed.length === 0) return null;
  if (run.sessionId === undefined) {
    const source = typeof run.metadata.source === 'string' ? run.metadata.source.trim() : '';
    await tx.execute(
      `insert into agent_sessions (id, workspace_id, app_id, title, mount, metadata, origin_source, kind)
       values (?, ?, ?, ?, ?, ?::jsonb, ?, 'deliverable_job')`,
      [
        sessionId,
        run.workspaceId,
        run.agentId,
        run.task.slice(0, 120),
        `/agents/${run.agentId}/sessions/${sessionId}`,
        JSON.stringify(run.metadata),
        run.source ?? (source || 'api'),
      ],
    );
  }
  await tx.execute(
    `insert into session_messages (id, workspace_id, session_id, run_id, role, content, metadata)
     values (?, ?, ?, ?, 'user', ?, '{}'::jsonb)`,
    [randomUUID(), run.workspaceId, sessionId, runId, run.task],
  );
  await tx.execute('update agent_sessions set last_message_at = now() where id = ?', [sessionId]);
  const created = await runStore.insertRun(tx, {
    id: runId,
    workspaceId: run.workspaceId,
    kind: 'autonomous',
    appId: run.agentId,
    sessionId,
    serialKey: `session:${sessionId}`,
    maxAttempts: deps.runs.maxAttempts('autonomous'),
    input: { message: run.task, model: null, apiKeyId: run.apiKeyId, requestId: run.requestId },
  });
  return { runId: created.id, sessionId, createdAt: created.createdAt };
}
