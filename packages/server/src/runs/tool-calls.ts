import { randomBytes } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { json, ms, type Row, toDate } from './store.js';
import type { ToolCallRecord } from './types.js';

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

/** The rows of the tool calls a run waits on (`tool_calls`): created, read, settled, swept when overdue. */
export const toolCallStore = {
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
