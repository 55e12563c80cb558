import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import { offsetPages, PagePromise } from '../core/pagination.js';
import { AgentTurnStream, type ApproveHandler, type ToolHandlers } from '../lib/agent-stream.js';
import { enc } from './agents.js';
import type { AgentSession, SessionTimeline, ToolApprovalAccepted, ToolResultAccepted } from './types.js';

type Opts = { signal?: AbortSignal };

export interface SendMessageOptions {
  /** Model override for this turn only: a model id of `client.models.list()`, 1 to 200 characters. */
  model?: string;
  /** Handlers of integrator-owned tools, run automatically when the agent asks for them. */
  tools?: ToolHandlers;
  /**
   * Decides calls of tools the agent's `toolApproval` names, as they come: `true`, `{arguments}`
   * (run with these instead), `false` or `{reason}` (declined). Without it, the call waits for
   * `approveToolCall` / `denyToolCall` (e.g. a person in the console) until its deadline.
   */
  approve?: ApproveHandler;
  /** When a turn is already running: `reject` (409, default), `queue` or `interrupt`. */
  concurrency?: 'reject' | 'queue' | 'interrupt';
  /** Aborts the stream (the turn goes on server-side; use `cancel` to stop it). */
  signal?: AbortSignal;
  /** Reconnect attempts when the connection drops mid-turn (default 3). */
  maxReconnects?: number;
}

/** Sessions of managed agents, their turns and timelines. */
export class Sessions {
  constructor(private readonly client: AiSuite) {}

  /** Newest first, `limit` 1..100 (default 25); iterate for every session of the agent. */
  list(
    agentId: string,
    query: { limit?: number; offset?: number } = {},
    opts: Opts = {},
  ): PagePromise<
    { sessions: AgentSession[]; total: number },
    AgentSession,
    { limit?: number; offset?: number }
  > {
    return new PagePromise(
      (q) =>
        this.client.request({
          method: 'GET',
          path: `/managed-agents/agents/${enc(agentId)}/sessions`,
          query: q,
          ...opts,
        }),
      query,
      offsetPages(
        (b) => b.sessions,
        (b) => b.total,
      ),
    );
  }

  /**
   * Opens a session of the agent. `RateLimitError` (429) past the workspace's session-creation rate.
   *
   * @param agentId an agent of the workspace (`NotFoundError` `Agent not found` otherwise)
   * @param body `metadata` (any object), `end_user_id` (at most 256 characters: who the session
   *   is for), `title` (at most 200 characters)
   */
  create(
    agentId: string,
    body: { metadata?: Record<string, unknown>; end_user_id?: string; title?: string } = {},
    opts: Opts = {},
  ): APIPromise<{ session: { id: string; mount: string | null; created_at: string } }> {
    return this.client.request({
      method: 'POST',
      path: `/managed-agents/agents/${enc(agentId)}/sessions`,
      body,
      ...opts,
    });
  }

  retrieve(sessionId: string, opts: Opts = {}): APIPromise<{ session: AgentSession }> {
    return this.client.request({
      method: 'GET',
      path: `/managed-agents/sessions/${enc(sessionId)}`,
      ...opts,
    });
  }

  delete(sessionId: string, opts: Opts = {}): APIPromise<{ deleted: true }> {
    return this.client.request({
      method: 'DELETE',
      path: `/managed-agents/sessions/${enc(sessionId)}`,
      ...opts,
    });
  }

  /** The timeline: messages and turn runs, ascending by `created_at`. */
  events(sessionId: string, opts: Opts = {}): APIPromise<SessionTimeline> {
    return this.client.request({
      method: 'GET',
      path: `/managed-agents/sessions/${enc(sessionId)}/events`,
      ...opts,
    });
  }

  /** Answers a pending integrator-owned tool call with `result` or `error`. */
  submitToolResult(
    sessionId: string,
    body: { toolCallId: string; result: unknown } | { toolCallId: string; error: string },
    opts: Opts = {},
  ): APIPromise<ToolResultAccepted> {
    return this.client.request({
      method: 'POST',
      path: `/managed-agents/sessions/${enc(sessionId)}/tool-results`,
      body,
      ...opts,
    });
  }

  /**
   * Approves a call waiting for a decision (`tool_call.approval_required`); `arguments` replace
   * the model's and must match the tool's inputSchema (`BadRequestError` otherwise). The turn
   * resumes and the tool runs. `ConflictError` once decided or past the deadline,
   * `NotFoundError` `Unknown toolCallId`, `PermissionDeniedError` for another session's call.
   */
  approveToolCall(
    sessionId: string,
    toolCallId: string,
    body: { arguments?: Record<string, unknown> } = {},
    opts: Opts = {},
  ): APIPromise<ToolApprovalAccepted> {
    return this.client.request({
      method: 'POST',
      path: `/managed-agents/sessions/${enc(sessionId)}/tool-approvals`,
      body: { toolCallId, approved: true, ...body },
      maxRetries: 0,
      ...opts,
    });
  }

  /** Declines a call waiting for a decision: the model is told a person declined, with `reason`. */
  denyToolCall(
    sessionId: string,
    toolCallId: string,
    body: { reason?: string } = {},
    opts: Opts = {},
  ): APIPromise<ToolApprovalAccepted> {
    return this.client.request({
      method: 'POST',
      path: `/managed-agents/sessions/${enc(sessionId)}/tool-approvals`,
      body: { toolCallId, approved: false, ...body },
      maxRetries: 0,
      ...opts,
    });
  }

  /** Cancels a running turn (or autonomous run); `BadRequestError` `Run is <status>` otherwise. */
  cancel(
    sessionId: string,
    runId: string,
    opts: Opts = {},
  ): APIPromise<{ runId: string; status: 'cancelled' }> {
    return this.client.request({
      method: 'POST',
      path: `/managed-agents/sessions/${enc(sessionId)}/cancel`,
      body: { runId },
      maxRetries: 0,
      ...opts,
    });
  }

  /**
   * Sends a message and streams the turn. Integrator-owned tools with a handler in
   * `options.tools` run automatically (a throwing handler reports an `error` result).
   *
   * @param sessionId a session of the workspace's agents
   * @param message required and not empty (`BadRequestError` `message is required`); at most
   *   100,000 characters
   * @param options `model` for this turn, `tools`, `concurrency` when a turn already runs,
   *   `signal`, `maxReconnects`. `RateLimitError` (429) past the workspace's agent-message rate.
   */
  send(sessionId: string, message: string, options: SendMessageOptions = {}): AgentTurnStream {
    const body: Record<string, unknown> = { message };
    if (options.model) body.model = options.model;
    if (options.concurrency) body.concurrency = options.concurrency;
    return new AgentTurnStream(this.client, sessionId, {
      open: (signal) =>
        this.client.requestRaw({
          method: 'POST',
          path: `/managed-agents/sessions/${enc(sessionId)}/messages`,
          body,
          headers: { accept: 'text/event-stream' },
          signal,
          maxRetries: 0,
        }),
      tools: options.tools,
      approve: options.approve,
      signal: options.signal,
      maxReconnects: options.maxReconnects,
    });
  }

  /** Re-attaches to a turn's stream, replaying the events after `lastEventId`. */
  stream(
    sessionId: string,
    runId: string,
    options: {
      lastEventId?: string | number;
      tools?: ToolHandlers;
      approve?: ApproveHandler;
      signal?: AbortSignal;
    } = {},
  ): AgentTurnStream {
    return new AgentTurnStream(this.client, sessionId, {
      runId,
      lastEventId: options.lastEventId === undefined ? undefined : String(options.lastEventId),
      tools: options.tools,
      approve: options.approve,
      signal: options.signal,
    });
  }
}
