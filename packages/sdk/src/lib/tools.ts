import type { AiSuite } from '../client.js';
import { AiSuiteError } from '../core/errors.js';

export interface ToolHandlerContext {
  toolCallId: string;
  runId: string;
  sessionId: string;
  signal: AbortSignal;
}
export type ToolHandler = (args: any, ctx: ToolHandlerContext) => unknown | Promise<unknown>;
export type ToolHandlers = Record<string, ToolHandler>;

/** A pending integrator-owned tool call, as the stream event and the run's events carry it. */
export interface PendingToolCall {
  toolCallId: string;
  runId: string;
  name: string;
  arguments: unknown;
  deadline?: string;
}

/**
 * The agent asked for an integrator-owned tool that has no handler in `tools`. Thrown at once
 * instead of waiting for the tool deadline. The call is still pending on the server: answer it
 * with `client.sessions.submitToolResult(sessionId, { toolCallId, result })`, or cancel the run.
 */
export class MissingToolHandlerError extends AiSuiteError {
  override name = 'MissingToolHandlerError';
  readonly toolName: string;
  readonly toolCallId: string;
  readonly runId: string;
  readonly sessionId: string;
  readonly arguments: unknown;
  readonly deadline: string | undefined;

  constructor(call: PendingToolCall, sessionId: string) {
    super(
      `The agent called the tool "${call.name}", which has no handler in \`tools\`; the call ${call.toolCallId} waits for a result${call.deadline ? ` until ${call.deadline}` : ''} (submitToolResult, or cancel the run)`,
    );
    this.toolName = call.name;
    this.toolCallId = call.toolCallId;
    this.runId = call.runId;
    this.sessionId = sessionId;
    this.arguments = call.arguments;
    this.deadline = call.deadline;
  }
}

/**
 * Runs `handler` for a pending call and posts its outcome; a throwing handler posts `error`
 * (the model sees it), never crashes the caller's loop.
 */
export async function answerToolCall(
  client: AiSuite,
  sessionId: string,
  handler: ToolHandler,
  call: PendingToolCall,
  signal: AbortSignal,
): Promise<void> {
  let body: { toolCallId: string; result: unknown } | { toolCallId: string; error: string };
  try {
    const result = await handler(call.arguments, {
      toolCallId: call.toolCallId,
      runId: call.runId,
      sessionId,
      signal,
    });
    body = { toolCallId: call.toolCallId, result: result === undefined ? null : result };
  } catch (err) {
    body = { toolCallId: call.toolCallId, error: err instanceof Error ? err.message : String(err) };
  }
  try {
    await client.sessions.submitToolResult(sessionId, body);
  } catch {
    // The deadline or a repeated post may have settled it already; the stream or run tells.
  }
}
