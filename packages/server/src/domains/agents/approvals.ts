import type { EntityManager } from '@mikro-orm/postgresql';
import { Ajv, type ValidateFunction } from 'ajv';
import { BoundedMap } from '../../bounded-map.js';
import { badRequest, conflict, forbidden, notFound } from '../../http/errors.js';
import { type RunEngine, type RunExecution, runStore, type ToolCallRecord } from '../../runs/index.js';
import type { AgentConfig } from './schema.js';
import type { AgentTool } from './tools.js';

/**
 * Tool approval (docs/agents.md, "Tool approval"). A call of a tool named in the agent's
 * `toolApproval` is stored as a `tool_calls` row of kind `approval` and parks the run like an
 * integrator-owned call; a person's decision (or the deadline) settles the row and un-parks the
 * run, and whichever process claims it next runs the approved tool or tells the model it was
 * declined.
 */

/** `AGENT_APPROVAL_DEADLINE_MS` when unset: 10 minutes. */
export const APPROVAL_DEADLINE_DEFAULT_MS = 600_000;
export const APPROVAL_DECLINED = 'A person declined this tool call';
export const APPROVAL_EXPIRED_REASON = 'no decision came before the approval deadline';
export const UNKNOWN_TOOL_CALL = 'Unknown toolCallId';
/** Largest `arguments` object an approval may carry (serialised JSON). */
export const APPROVAL_ARGUMENTS_MAX_BYTES = 256 * 1024;

const sanitize = (name: string) => name.replace(/[^a-zA-Z0-9_-]/g, '_');

/** Whether calls of the tool `name` (as offered to the model) wait for a person's decision. */
export function needsApproval(config: AgentConfig, name: string): boolean {
  const list = config.toolApproval ?? [];
  // A pack tool is offered under its id with "." and other marks as "_": both spellings match.
  return list.some((e) => e === '*' || e === name || sanitize(e) === name);
}

export type ApprovalOutcome =
  | { approved: true; arguments: Record<string, unknown> }
  | { approved: false; error: string };

/** `tool_call.approval_decided` of a settled approval call (emitted by the resumed run). */
export function decidedEvent(runId: string, call: ToolCallRecord | undefined, id: string, name: string) {
  const status =
    call?.status === 'approved' || call?.status === 'denied' || call?.status === 'expired'
      ? call.status
      : 'cancelled';
  const outcome = approvalOutcome(call);
  return {
    runId,
    toolCallId: id,
    name,
    status,
    ...(outcome.approved ? { arguments: outcome.arguments } : {}),
    ...(status === 'denied' ? { reason: call?.error ?? null } : {}),
  };
}

/** What a settled approval call means for the turn: run the tool, or tell the model why not. */
export function approvalOutcome(call: ToolCallRecord | undefined): ApprovalOutcome {
  if (call?.status === 'approved') {
    const args = (call.result as { arguments?: unknown } | null)?.arguments ?? call.arguments;
    return { approved: true, arguments: (args ?? {}) as Record<string, unknown> };
  }
  if (call?.status === 'denied') {
    return { approved: false, error: call.error ? `${APPROVAL_DECLINED}: ${call.error}` : APPROVAL_DECLINED };
  }
  if (call?.status === 'expired')
    return { approved: false, error: `${APPROVAL_DECLINED}: ${APPROVAL_EXPIRED_REASON}` };
  return { approved: false, error: call?.error ?? 'Tool call failed' };
}

/** Compiled validators of tool input schemas, by the schema's JSON. */
const validators = new BoundedMap<string, ValidateFunction>(500);
const ajv = new Ajv({ strict: false, allErrors: false, validateSchema: true });

/**
 * Checks approved arguments against the tool's input schema; the 400 names the first
 * mismatch (`details.errors` has them all, as Ajv reports them).
 */
export function assertArgumentsMatch(
  schema: Record<string, unknown> | null,
  args: Record<string, unknown>,
): void {
  if (Buffer.byteLength(JSON.stringify(args)) > APPROVAL_ARGUMENTS_MAX_BYTES) {
    throw badRequest(`arguments exceed ${APPROVAL_ARGUMENTS_MAX_BYTES} bytes`, 'INVALID_ARGUMENTS');
  }
  if (!schema) return;
  const key = JSON.stringify(schema);
  let validate = validators.get(key);
  if (!validate) {
    try {
      validate = ajv.compile(schema);
    } catch (err) {
      throw badRequest(
        `The tool's inputSchema cannot be used to check arguments: ${err instanceof Error ? err.message : err}`,
        'INVALID_ARGUMENTS',
      );
    }
    validators.set(key, validate);
  }
  if (validate(args)) return;
  const errors = (validate.errors ?? []).map((e) => ({
    path: e.instancePath || '/',
    message: e.message ?? 'is invalid',
  }));
  const first = errors[0];
  throw badRequest(
    `arguments do not match the tool's inputSchema: ${first ? `${first.path} ${first.message}` : 'invalid'}`,
    'INVALID_ARGUMENTS',
    { errors },
  );
}

export interface ApprovalDecisionInput {
  toolCallId: string;
  approved: boolean;
  arguments?: Record<string, unknown>;
  reason?: string;
}

/**
 * `POST /managed-agents/sessions/{sessionId}/tool-approvals`: decides a waiting call of the
 * session once. 404 for an id that is not an approval of the caller's workspace, 403 for one
 * of another session, 409 once decided or past its deadline (an overdue one is expired here
 * and its run goes on), 400 for arguments that break the tool's input schema. Nothing runs
 * here: the run resumes in whichever process claims it.
 */
export async function decideToolApproval(
  em: EntityManager,
  runs: RunEngine,
  workspaceId: string,
  sessionId: string,
  input: ApprovalDecisionInput,
) {
  const call = await runStore.getToolCall(em, input.toolCallId);
  if (!call || call.workspaceId !== workspaceId || call.kind !== 'approval')
    throw notFound(UNKNOWN_TOOL_CALL);
  if (call.sessionId !== sessionId) throw forbidden('toolCallId does not belong to session');
  if (input.approved && input.arguments) assertArgumentsMatch(call.inputSchema, input.arguments);
  const decided =
    call.status === 'pending'
      ? await runStore.decideToolCall(
          em,
          call.id,
          input.approved
            ? { approved: true, arguments: input.arguments ?? call.arguments }
            : { approved: false, reason: input.reason ?? null },
        )
      : null;
  if (!decided) {
    const now = (await runStore.getToolCall(em, call.id)) ?? call;
    if (now.status === 'pending') {
      // Past its deadline, not swept yet: expire it now, so the run goes on at once.
      await runs.settleToolCall(call.id, { error: 'Tool call deadline expired', expired: true });
    }
    if (now.status === 'pending' || now.status === 'expired') {
      throw conflict('The approval deadline has passed', 'APPROVAL_EXPIRED', { status: 'expired' });
    }
    throw conflict('toolCallId is already decided', 'APPROVAL_DECIDED', { status: now.status });
  }
  const status = decided.status as 'approved' | 'denied';
  // The resumed run reports the decision (`tool_call.approval_decided`): the run may still hold
  // its lease here, with events not written yet, so nothing is appended to its log from here.
  if (await runStore.unpark(em, decided.runId)) await runs.bus.publish({ t: 'wake' });
  return { accepted: true as const, sessionId, toolCallId: decided.id, status };
}

/**
 * Parks a call of a tool that needs approval: a `tool_calls` row of kind `approval` (with the
 * tool's input schema and the decision's deadline) and `tool_call.approval_required`.
 */
export async function requestApproval(
  runs: RunEngine,
  em: EntityManager,
  exec: RunExecution,
  tool: AgentTool,
  call: { id: string; name: string },
  args: Record<string, unknown>,
  deadlineMs: number,
): Promise<string> {
  const { run } = exec;
  const tc = await runs.createToolCall(em, {
    runId: run.id,
    workspaceId: run.workspaceId,
    sessionId: run.sessionId,
    modelCallId: call.id,
    name: call.name,
    arguments: args,
    deadlineMs,
    kind: 'approval',
    inputSchema: tool.definition.parameters ?? null,
  });
  await exec.emit('tool_call.approval_required', {
    runId: run.id,
    toolCallId: tc.id,
    name: call.name,
    arguments: args,
    deadline: tc.deadlineAt.toISOString(),
  });
  return tc.id;
}

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
