import type { AiSuite } from '../client.js';

/** A tool call waiting for a person's decision (`tool_call.approval_required`). */
export interface ApprovalRequest {
  toolCallId: string;
  runId: string;
  name: string;
  /** What the model asked to run the tool with. */
  arguments: any;
  /** When the call counts as declined without a decision (ISO 8601). */
  deadline: string;
}

/**
 * Decides a call waiting for approval: `true` runs it as the model asked, `{arguments}` runs it
 * with these instead (checked against the tool's inputSchema by the service), `false` declines
 * it (the model is told a person declined), `{reason}` declines it with that reason.
 */
export type ApproveHandler = (
  call: ApprovalRequest,
) =>
  | boolean
  | { arguments: Record<string, unknown> }
  | { reason: string }
  | Promise<boolean | { arguments: Record<string, unknown> } | { reason: string }>;

/**
 * Runs `approve` for a call and posts the decision; a throwing callback declines the call with
 * its message. A call already decided elsewhere (409) or past its deadline is left as it is.
 */
export async function answerApproval(
  client: AiSuite,
  sessionId: string,
  approve: ApproveHandler,
  call: ApprovalRequest,
): Promise<void> {
  let decision: Awaited<ReturnType<ApproveHandler>>;
  try {
    decision = await approve(call);
  } catch (err) {
    decision = { reason: err instanceof Error ? err.message : String(err) };
  }
  try {
    if (decision === true) await client.sessions.approveToolCall(sessionId, call.toolCallId);
    else if (decision && typeof decision === 'object' && 'arguments' in decision) {
      await client.sessions.approveToolCall(sessionId, call.toolCallId, { arguments: decision.arguments });
    } else {
      const reason = decision && typeof decision === 'object' ? decision.reason : undefined;
      await client.sessions.denyToolCall(sessionId, call.toolCallId, reason === undefined ? {} : { reason });
    }
  } catch {
    // Decided elsewhere, past its deadline, or arguments the schema refused: the stream or the
    // run's events tell what happened (a refused decision leaves the call waiting).
  }
}
