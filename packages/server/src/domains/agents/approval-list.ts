import type { EntityManager } from '@mikro-orm/postgresql';

/** Approvals as people see them: the session timeline and an agent's calls waiting for a decision. */

type Row = Record<string, unknown>;
const iso = (v: unknown) => (v == null ? null : (v instanceof Date ? v : new Date(String(v))).toISOString());
const json = (v: unknown) => (typeof v === 'string' ? JSON.parse(v) : v);

/** An approval as the timeline and the agent's approval list show it. */
function toApproval(r: Row) {
  const status = r.status === 'completed' || r.status === 'failed' ? 'cancelled' : String(r.status);
  return {
    toolCallId: r.id as string,
    runId: r.run_id as string,
    sessionId: (r.session_id as string) ?? null,
    name: r.name as string,
    arguments: (json(r.arguments) ?? {}) as Record<string, unknown>,
    status: status as 'pending' | 'approved' | 'denied' | 'expired' | 'cancelled',
    approvedArguments:
      r.status === 'approved'
        ? ((json(r.result) as { arguments?: Record<string, unknown> })?.arguments ?? null)
        : null,
    reason: r.status === 'denied' ? ((r.error as string) ?? null) : null,
    deadline: iso(r.deadline_at) as string,
    createdAt: iso(r.created_at) as string,
    decidedAt: iso(r.completed_at),
  };
}
export type ApprovalDto = ReturnType<typeof toApproval>;

/** The approvals of a session's runs, by run id (the session timeline). */
export async function approvalsOfSession(
  em: EntityManager,
  sessionId: string,
): Promise<Map<string, ApprovalDto[]>> {
  const rows = await em.execute<Row[]>(
    `select * from tool_calls where session_id = ? and kind = 'approval' order by created_at, id`,
    [sessionId],
  );
  const out = new Map<string, ApprovalDto[]>();
  for (const r of rows) {
    const list = out.get(r.run_id as string) ?? [];
    list.push(toApproval(r));
    out.set(r.run_id as string, list);
  }
  return out;
}

/** Calls of an agent's runs waiting for a decision, oldest first (at most `limit`). */
export async function pendingApprovalsOfAgent(
  em: EntityManager,
  workspaceId: string,
  agentId: string,
  limit: number,
): Promise<ApprovalDto[]> {
  const rows = await em.execute<Row[]>(
    `select t.* from tool_calls t join runs r on r.id = t.run_id
     where t.workspace_id = ? and r.app_id = ? and t.kind = 'approval' and t.status = 'pending'
       and t.deadline_at > now()
     order by t.created_at, t.id limit ?`,
    [workspaceId, agentId, limit],
  );
  return rows.map(toApproval);
}
