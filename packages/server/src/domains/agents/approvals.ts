import type { EntityManager } from '@mikro-orm/postgresql';
import { Ajv, type ValidateFunction } from 'ajv';
import { BoundedMap } from '../../bounded-map.js';
import { appError } from '../../errors/index.js';
import {
  type RunEngine,
  type RunExecution,
  runStore,
  type ToolCallRecord,
  toolCallStore,
} from '../../runs/index.js';
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
    throw appError('APPROVAL_ARGUMENTS_TOO_LARGE', { maxBytes: APPROVAL_ARGUMENTS_MAX_BYTES });
  }
  if (!schema) return;
  const key = JSON.stringify(schema);
  let validate = validators.get(key);
  if (!validate) {
    try {
      validate = ajv.compile(schema);
    } catch (err) {
      throw appError('APPROVAL_INPUT_SCHEMA_UNUSABLE', {
        reason: err instanceof Error ? err.message : String(err),
      });
    }
    validators.set(key, validate);
  }
  if (validate(args)) return;
  const errors = (validate.errors ?? []).map((e) => ({
    path: e.instancePath || '/',
    message: e.message ?? 'is invalid',
  }));
  const first = errors[0];
  throw appError('APPROVAL_ARGUMENTS_MISMATCH', {
    mismatch: first ? `${first.path} ${first.message}` : 'invalid',
    details: { errors },
  });
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
  const call = await toolCallStore.getToolCall(em, input.toolCallId);
  if (!call || call.workspaceId !== workspaceId || call.kind !== 'approval')
    throw appError('UNKNOWN_TOOL_CALL');
  if (call.sessionId !== sessionId) throw appError('TOOL_CALL_OTHER_SESSION');
  if (input.approved && input.arguments) assertArgumentsMatch(call.inputSchema, input.arguments);
  const decided =
    call.status === 'pending'
      ? await toolCallStore.decideToolCall(
          em,
          call.id,
          input.approved
            ? { approved: true, arguments: input.arguments ?? call.arguments }
            : { approved: false, reason: input.reason ?? null },
        )
      : null;
  if (!decided) {
    const now = (await toolCallStore.getToolCall(em, call.id)) ?? call;
    if (now.status === 'pending') {
      // Past its deadline, not swept yet: expire it now, so the run goes on at once.
      await runs.settleToolCall(call.id, { error: 'Tool call deadline expired', expired: true });
    }
    if (now.status === 'pending' || now.status === 'expired') {
      throw appError('APPROVAL_EXPIRED', { details: { status: 'expired' } });
    }
    throw appError('APPROVAL_DECIDED', { details: { status: now.status } });
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
