import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import { AiSuiteError, APIUserAbortError } from '../core/errors.js';
import { offsetPages, PagePromise } from '../core/pagination.js';
import { type ApprovalRequest, type ApproveHandler, answerApproval } from '../lib/approvals.js';
import {
  answerToolCall,
  MissingToolHandlerError,
  type PendingToolCall,
  type ToolHandlers,
} from '../lib/tools.js';
import type { Run, RunArtifact, RunCreated, RunDetail, RunList, RunMetadata } from './types.js';

export interface RunCreateParams {
  /** What the agent should do: required, 1 to 100,000 characters. */
  task: string;
  /** Run in an existing session of the agent; a new `deliverable_job` session otherwise. */
  sessionId?: string;
  /** Origin fields; `messageId` is the idempotency key (same key, same agent → same run). */
  metadata?: RunMetadata;
  /**
   * Completion webhook, POSTed once when the run ends, signed per Standard Webhooks (check it with
   * `verifyWebhook`; docs/webhooks.md): an http(s) URL of at most 2048 characters that the
   * service may reach (400 otherwise).
   */
  webhookUrl?: string;
}

export interface PollOptions {
  signal?: AbortSignal;
  /** Wait used when the server sends no hint (ms, default 2000). */
  intervalMs?: number;
  /** Give up (throw `RunPollTimeoutError`) after this long (ms, default: never). */
  timeoutMs?: number;
  /** Called with every fetched state, terminal included. */
  onUpdate?: (detail: RunDetail) => void;
  /**
   * Handlers of integrator-owned tools, as for `sessions.send`: a pending call found while
   * polling runs its handler and posts the result (the run resumes). A pending call without a
   * handler throws `MissingToolHandlerError` at once.
   */
  tools?: ToolHandlers;
  /**
   * Decides calls waiting for approval, as for `sessions.send` (`true`, `{arguments}`, `false`,
   * `{reason}`). Without it, polling goes on while a person decides elsewhere.
   */
  approve?: ApproveHandler;
}

interface Opts {
  signal?: AbortSignal;
}

export type RunListQuery = {
  limit?: number;
  offset?: number;
  /** Only the runs this schedule started. */
  scheduleId?: string;
};

export const TERMINAL_RUN_STATUSES = ['completed', 'failed', 'cancelled'] as const;
export const isTerminalRunStatus = (s: string) => (TERMINAL_RUN_STATUSES as readonly string[]).includes(s);

/** Tool calls of the run still waiting for the integrator: pending, with no result event yet. */
function pendingToolCalls(detail: RunDetail): PendingToolCall[] {
  const settled = new Set(
    detail.events
      .filter((e) => e.event_type === 'tool_call.completed')
      .map((e) => String(e.payload.toolCallId)),
  );
  return detail.events
    .filter((e) => e.event_type === 'tool_call.pending' && !settled.has(String(e.payload.toolCallId)))
    .map((e) => ({
      toolCallId: String(e.payload.toolCallId),
      runId: detail.run.id,
      name: String(e.payload.name),
      arguments: e.payload.arguments,
      deadline: typeof e.payload.deadline === 'string' ? e.payload.deadline : undefined,
    }));
}

/** Calls of the run waiting for a person's decision: no `tool_call.approval_decided` yet. */
function pendingApprovals(detail: RunDetail): ApprovalRequest[] {
  const decided = new Set(
    detail.events
      .filter((e) => e.event_type === 'tool_call.approval_decided')
      .map((e) => String(e.payload.toolCallId)),
  );
  return detail.events
    .filter(
      (e) => e.event_type === 'tool_call.approval_required' && !decided.has(String(e.payload.toolCallId)),
    )
    .map((e) => ({
      toolCallId: String(e.payload.toolCallId),
      runId: detail.run.id,
      name: String(e.payload.name),
      arguments: e.payload.arguments,
      deadline: String(e.payload.deadline),
    }));
}

/** `poll` gave up before the run ended. */
export class RunPollTimeoutError extends AiSuiteError {
  constructor(
    readonly runId: string,
    readonly last: RunDetail | undefined,
  ) {
    super(`Run ${runId} did not finish in time (last status: ${last?.run.status ?? 'unknown'})`);
    this.name = 'RunPollTimeoutError';
  }
}

/** An artifact of a run with its download. */
export interface RunArtifactHandle extends RunArtifact {
  /** The content as a `Response` (`.text()`, `.arrayBuffer()`, `.body` stream). */
  download(opts?: Opts): Promise<Response>;
  /** The whole content in memory. */
  bytes(opts?: Opts): Promise<Uint8Array>;
}

/**
 * When to poll again (ms): the server's `X-Poll-After-Ms`, else `Retry-After` (seconds),
 * else `fallback`.
 */
export function pollDelay(headers: Headers, fallback: number): number {
  const ms = Number(headers.get('x-poll-after-ms'));
  if (headers.get('x-poll-after-ms') !== null && Number.isFinite(ms) && ms >= 0) return ms;
  const ra = headers.get('retry-after');
  if (ra !== null) {
    const s = Number(ra);
    if (Number.isFinite(s) && s >= 0) return s * 1000;
    const at = Date.parse(ra);
    if (Number.isFinite(at)) return Math.max(0, at - Date.now());
  }
  return fallback;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(new APIUserAbortError());
    const onAbort = () => {
      clearTimeout(t);
      reject(new APIUserAbortError());
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/**
 * Autonomous runs of an agent (`/managed-agents/agents/{agentId}/runs`, docs/runs.md):
 * start one, follow it by polling (honouring the server's hint), and download its artifacts.
 */
export class Runs {
  constructor(private readonly client: AiSuite) {}

  private base(agentId: string) {
    return `/managed-agents/agents/${encodeURIComponent(agentId)}/runs`;
  }

  /** Starts a run: `{runId, sessionId, created_at}`. Idempotent on `metadata.messageId`. */
  create(agentId: string, params: RunCreateParams, opts: Opts = {}): APIPromise<RunCreated> {
    return this.client.request({ method: 'POST', path: this.base(agentId), body: params, ...opts });
  }

  /**
   * Runs of the agent, newest first (`limit` 1 to 100, default 25); iterate for all of them.
   * `scheduleId` keeps the runs that schedule started (its ticks and its "run now").
   */
  list(agentId: string, query: RunListQuery = {}, opts: Opts = {}): PagePromise<RunList, Run, RunListQuery> {
    return new PagePromise(
      (q) => this.client.request({ method: 'GET', path: this.base(agentId), query: q, ...opts }),
      query,
      offsetPages(
        (b) => b.runs,
        (b) => b.total,
      ),
    );
  }

  /** The run with its events and artifacts; `withResponse()` exposes the poll hint headers. */
  get(agentId: string, runId: string, opts: Opts = {}): APIPromise<RunDetail> {
    return this.client.request({
      method: 'GET',
      path: `${this.base(agentId)}/${encodeURIComponent(runId)}`,
      ...opts,
    });
  }

  /** Polls until the run is `completed`, `failed` or `cancelled`, waiting as the server says. */
  async poll(agentId: string, runId: string, opts: PollOptions = {}): Promise<RunDetail> {
    const deadline = opts.timeoutMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + opts.timeoutMs;
    let last: RunDetail | undefined;
    const answered = new Set<string>();
    const signal = opts.signal ?? new AbortController().signal;
    for (;;) {
      const { data, response } = await this.get(agentId, runId, { signal: opts.signal }).withResponse();
      last = data;
      opts.onUpdate?.(data);
      if (isTerminalRunStatus(data.run.status)) return data;
      const calls = pendingToolCalls(data).filter((c) => !answered.has(c.toolCallId));
      for (const call of calls) {
        const handler = opts.tools?.[call.name];
        if (!handler) throw new MissingToolHandlerError(call, data.run.session_id);
        answered.add(call.toolCallId);
        await answerToolCall(this.client, data.run.session_id, handler, call, signal);
      }
      const approvals = opts.approve ? pendingApprovals(data).filter((c) => !answered.has(c.toolCallId)) : [];
      for (const call of approvals) {
        answered.add(call.toolCallId);
        await answerApproval(this.client, data.run.session_id, opts.approve as ApproveHandler, call);
      }
      // Right after answering, the run resumes: look again soon rather than after the hint.
      const wait =
        calls.length + approvals.length > 0
          ? Math.min(250, opts.intervalMs ?? 250)
          : pollDelay(response.headers, opts.intervalMs ?? 2000);
      if (Date.now() + wait > deadline) throw new RunPollTimeoutError(runId, last);
      await sleep(wait, opts.signal);
    }
  }

  /** `create` then `poll`: resolves with the finished run. */
  async createAndPoll(agentId: string, params: RunCreateParams, opts: PollOptions = {}): Promise<RunDetail> {
    const { runId } = await this.create(agentId, params, { signal: opts.signal });
    return this.poll(agentId, runId, opts);
  }

  /**
   * The artifacts of a run, each with `download()` / `bytes()` reading the storage file
   * (type `deliverable`) behind it.
   */
  async artifacts(agentId: string, runId: string, opts: Opts = {}): Promise<RunArtifactHandle[]> {
    const detail = await this.get(agentId, runId, opts);
    return detail.artifacts.map((a) => this.handle(a));
  }

  /** The content of one artifact (from `get`/`poll`) as a `Response`. */
  async download(artifact: Pick<RunArtifact, 'file_id'>, opts: Opts = {}): Promise<Response> {
    const ws = await this.client.workspaceId();
    return this.client.requestRaw({
      method: 'GET',
      path: `/workspaces/${encodeURIComponent(ws)}/storage/content`,
      query: { fileId: artifact.file_id, fileType: 'deliverable' },
      ...opts,
    });
  }

  private handle(a: RunArtifact): RunArtifactHandle {
    return {
      ...a,
      download: (opts) => this.download(a, opts),
      bytes: async (opts) => new Uint8Array(await (await this.download(a, opts)).arrayBuffer()),
    };
  }
}
