import type { AiSuite } from '../client.js';
import { AiSuiteError, APIUserAbortError } from '../core/errors.js';
import { readServerSentEvents } from '../core/sse.js';
import { type ApproveHandler, answerApproval } from './approvals.js';
import { answerToolCall, MissingToolHandlerError, type PendingToolCall, type ToolHandlers } from './tools.js';

export type { ApprovalRequest, ApproveHandler } from './approvals.js';
export type { ToolHandler, ToolHandlerContext, ToolHandlers } from './tools.js';

/** The events of a managed-agent turn (docs/agents.md). */
export type AgentEvent =
  | { type: 'run.started'; runId: string; sessionId: string }
  | { type: 'message.delta'; runId: string; content: string }
  | { type: 'message.completed'; runId: string; messageId: string; content: string }
  | {
      type: 'tool_call.pending';
      runId: string;
      toolCallId: string;
      name: string;
      arguments: any;
      deadline?: string;
    }
  | {
      /** The call waits for a person's decision: `approveToolCall` / `denyToolCall` (or `approve`). */
      type: 'tool_call.approval_required';
      runId: string;
      toolCallId: string;
      name: string;
      arguments: any;
      deadline: string;
    }
  | {
      /** Reported as the run resumes: `expired` past the deadline, `cancelled` when the run ended first. */
      type: 'tool_call.approval_decided';
      runId: string;
      toolCallId: string;
      name: string;
      status: 'approved' | 'denied' | 'expired' | 'cancelled';
      /** What the tool runs with (approved). */
      arguments?: any;
      /** The reason given with a denial. */
      reason?: string | null;
    }
  | { type: 'tool_call.started'; runId: string; toolCallId: string; name: string; arguments: any }
  | {
      type: 'tool_call.completed';
      runId: string;
      toolCallId: string;
      name: string;
      status: 'completed' | 'error';
      result?: unknown;
      error?: string;
    }
  | { type: 'warning'; runId: string; code: string; message: string; server?: string }
  | { type: 'error'; code: string; message: string }
  | { type: 'run.completed'; runId: string }
  | { type: 'run.failed'; runId: string; error: string }
  | { type: 'run.cancelled'; runId: string };

export type AgentEventType = AgentEvent['type'];
export type AgentEventOf<T extends AgentEventType> = Extract<AgentEvent, { type: T }>;

/** The turn ended with `run.failed` or `run.cancelled`. */
export class AgentRunError extends AiSuiteError {
  override name = 'AgentRunError';
  constructor(
    message: string,
    readonly runId: string,
    readonly status: 'failed' | 'cancelled',
  ) {
    super(message);
  }
}

const TERMINAL = new Set(['run.completed', 'run.failed', 'run.cancelled']);
/** How long a stream must stay quiet on an unanswered call before it counts as a live wait. */
const UNANSWERED_QUIET_MS = 1000;

interface StreamSource {
  /** Opens the first connection (POST messages); absent when re-attaching to `runId`. */
  open?: (signal: AbortSignal) => Promise<Response>;
  runId?: string;
  lastEventId?: string;
  tools?: ToolHandlers;
  approve?: ApproveHandler;
  signal?: AbortSignal;
  maxReconnects?: number;
}

/**
 * One turn's event stream: an `AsyncIterable<AgentEvent>` (iterate once), with `on()`
 * listeners and `finalText()`. Integrator tools with a handler run automatically; a pending
 * call without one reaches whoever iterates (`tool_call.pending`), and fails `finalText()` /
 * `done()` with `MissingToolHandlerError`. A dropped connection reconnects with
 * `Last-Event-ID`, so no event is lost or repeated.
 */
export class AgentTurnStream implements AsyncIterable<AgentEvent> {
  private readonly controller = new AbortController();
  private readonly listeners = new Map<string, ((e: AgentEvent) => void)[]>();
  private readonly handled = new Set<string>();
  private readonly toolTasks: Promise<void>[] = [];
  private iterating = false;
  /** Set by `done()`/`finalText()`: nobody else sees a pending call, so one without handler fails. */
  private collecting = false;
  /** Pending calls without a handler, not answered yet (tracked only when collecting). */
  private readonly unanswered = new Map<string, PendingToolCall>();
  private consumed: Promise<AgentEvent[]> | undefined;
  private runIdValue: string | undefined;
  private lastEventId: string | undefined;

  constructor(
    private readonly client: AiSuite,
    readonly sessionId: string,
    private readonly source: StreamSource,
  ) {
    this.runIdValue = source.runId;
    this.lastEventId = source.lastEventId;
    source.signal?.addEventListener('abort', () => this.controller.abort(), { once: true });
  }

  /** The run id, once `run.started` was seen (or given when re-attaching). */
  get runId(): string | undefined {
    return this.runIdValue;
  }

  /** Calls `fn` for every event of `type` as the stream is consumed. Chainable. */
  on<T extends AgentEventType | '*'>(
    type: T,
    fn: (e: T extends AgentEventType ? AgentEventOf<T> : AgentEvent) => void,
  ): this {
    const list = this.listeners.get(type) ?? [];
    list.push(fn as (e: AgentEvent) => void);
    this.listeners.set(type, list);
    return this;
  }

  /** Stops reading (the turn goes on server-side; `cancel()` stops it). */
  abort(): void {
    this.controller.abort();
  }

  /** Cancels the turn on the server. */
  async cancel(): Promise<{ runId: string; status: 'cancelled' }> {
    const runId = this.runIdValue ?? (await this.waitForRunId());
    return this.client.sessions.cancel(this.sessionId, runId);
  }

  /**
   * Consumes the stream; resolves to every event. A pending integrator tool without a handler
   * in `tools` (and no `tool_call.pending` listener) rejects at once with
   * `MissingToolHandlerError` naming the tool, rather than waiting for the tool deadline.
   */
  done(): Promise<AgentEvent[]> {
    this.collecting = true;
    this.consumed ??= (async () => {
      const all: AgentEvent[] = [];
      for await (const e of this) all.push(e);
      return all;
    })();
    return this.consumed;
  }

  /**
   * Consumes the stream and resolves to the text of the last completed message; rejects with
   * `AgentRunError` when the turn failed or was cancelled.
   */
  async finalText(): Promise<string> {
    const events = await this.done();
    const end = events.at(-1);
    if (end?.type === 'run.failed') throw new AgentRunError(end.error, end.runId, 'failed');
    if (end?.type === 'run.cancelled') throw new AgentRunError('Run was cancelled', end.runId, 'cancelled');
    const messages = events.filter(
      (e): e is AgentEventOf<'message.completed'> => e.type === 'message.completed',
    );
    return messages.at(-1)?.content ?? '';
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<AgentEvent> {
    if (this.iterating) throw new AiSuiteError('An AgentTurnStream can be iterated only once');
    this.iterating = true;
    let reconnects = 0;
    const maxReconnects = this.source.maxReconnects ?? 3;
    let first = true;
    try {
      for (;;) {
        let response: Response;
        try {
          response =
            first && this.source.open ? await this.source.open(this.controller.signal) : await this.reopen();
        } catch (err) {
          if (!first && !(err instanceof APIUserAbortError) && reconnects++ < maxReconnects) continue;
          throw err;
        }
        first = false;
        let ended = false;
        const messages = readServerSentEvents(response.body as ReadableStream<Uint8Array>)[
          Symbol.asyncIterator
        ]();
        try {
          for (;;) {
            const next = await this.nextOrUnanswered(messages);
            if (next.done) break;
            const msg = next.value;
            if (!msg.data) continue;
            const event = JSON.parse(msg.data) as AgentEvent;
            if (msg.id !== undefined) this.lastEventId = msg.id;
            if (event.type === 'run.started') this.runIdValue = event.runId;
            this.dispatch(event);
            yield event;
            if (TERMINAL.has(event.type)) {
              ended = true;
              break;
            }
          }
        } catch (err) {
          if (err instanceof MissingToolHandlerError) throw err;
          if (this.controller.signal.aborted) throw new APIUserAbortError();
          if (!this.runIdValue || reconnects++ >= maxReconnects) throw err;
          continue;
        }
        if (ended) break;
        if (this.controller.signal.aborted) throw new APIUserAbortError();
        if (!this.runIdValue || reconnects++ >= maxReconnects) {
          throw new AiSuiteError('The turn stream ended before its terminal event');
        }
      }
      await Promise.all(this.toolTasks);
    } finally {
      this.controller.abort();
    }
  }

  /**
   * The next SSE message; but while a pending call nobody handles is unanswered and the stream
   * stays quiet for `UNANSWERED_QUIET_MS`, `MissingToolHandlerError` instead. The quiet period
   * tells a live wait from a replay (re-attaching replays a pending call together with its
   * later `tool_call.completed`, in one burst).
   */
  private async nextOrUnanswered<T>(it: AsyncIterator<T>): Promise<IteratorResult<T>> {
    const next = it.next();
    if (this.unanswered.size === 0) return next;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const quiet = new Promise<'quiet'>((r) => {
      timer = setTimeout(() => r('quiet'), UNANSWERED_QUIET_MS);
    });
    const first = await Promise.race([next, quiet]);
    clearTimeout(timer);
    if (first !== 'quiet') return first;
    void next.catch(() => undefined);
    const [call] = this.unanswered.values();
    throw new MissingToolHandlerError(call as PendingToolCall, this.sessionId);
  }

  private reopen(): Promise<Response> {
    const runId = this.runIdValue;
    if (!runId) throw new AiSuiteError('Cannot reconnect before the run started');
    return this.client.requestRaw({
      method: 'GET',
      path: `/managed-agents/sessions/${encodeURIComponent(this.sessionId)}/runs/${encodeURIComponent(runId)}/stream`,
      headers: {
        accept: 'text/event-stream',
        ...(this.lastEventId !== undefined ? { 'last-event-id': this.lastEventId } : {}),
      },
      signal: this.controller.signal,
    });
  }

  private dispatch(event: AgentEvent): void {
    for (const fn of [...(this.listeners.get(event.type) ?? []), ...(this.listeners.get('*') ?? [])])
      fn(event);
    if (event.type === 'tool_call.pending' && !this.handled.has(event.toolCallId)) {
      const handler = this.source.tools?.[event.name];
      if (handler) {
        this.handled.add(event.toolCallId);
        this.toolTasks.push(
          answerToolCall(this.client, this.sessionId, handler, event, this.controller.signal),
        );
      } else if (this.collecting && !this.listeners.has('tool_call.pending')) {
        this.unanswered.set(event.toolCallId, event);
      }
    }
    if (event.type === 'tool_call.completed') this.unanswered.delete(event.toolCallId);
    if (
      event.type === 'tool_call.approval_required' &&
      this.source.approve &&
      !this.handled.has(event.toolCallId)
    ) {
      this.handled.add(event.toolCallId);
      this.toolTasks.push(answerApproval(this.client, this.sessionId, this.source.approve, event));
    }
  }

  private async waitForRunId(): Promise<string> {
    return new Promise((resolve, reject) => {
      const onStart = (e: AgentEvent) => {
        if (e.type === 'run.started') resolve(e.runId);
      };
      this.on('run.started', onStart);
      this.controller.signal.addEventListener('abort', () => reject(new APIUserAbortError()), { once: true });
    });
  }
}
