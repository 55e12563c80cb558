import type { ServerResponse } from 'node:http';
import type { EntityManager } from '@mikro-orm/postgresql';
import { resolveApiKey } from '../../auth/api-keys.js';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { AppError, appError } from '../../errors/index.js';
import type { LlmMessage, ToolCall } from '../../providers/llm.js';
import { estimateTokens, messageChars } from '../../providers/tokens.js';
import { type RunEvent, toolCallStore } from '../../runs/index.js';
import { effectiveConfig, isUuid } from '../agents/config.js';
import type { AgentDeps } from '../agents/service.js';
import { AgentTurns } from '../agents/turns.js';
import type { CompletionRequest } from './chat-request.js';
import { ChunkWriter, completionObject, usageOf } from './completion-writer.js';
import { sendOpenAiError, toOpenAiError } from './error-routes.js';
import { invalidRequest, modelNotFound, OpenAiError, unsupported, withOpenAiRateHeaders } from './errors.js';
import type { OpenAiRequest } from './request.js';

/** The response header naming the agent session a completion ran in. */
export const SESSION_HEADER = 'x-agent-session-id';

/** How often a turn that surfaced an integrator tool call is checked for having paused. */
const PARK_POLL_MS = 25;

type Row = Record<string, unknown>;

/** The session a `user` continues on an agent: the newest one this surface opened for it. */
async function userSession(
  em: EntityManager,
  ws: string,
  agentId: string,
  user: string,
): Promise<string | undefined> {
  const rows = await em.execute<Row[]>(
    `select id from agent_sessions
      where workspace_id = ? and app_id = ? and end_user_id = ? and metadata->>'openai_user' = ?
      order by created_at desc limit 1`,
    [ws, agentId, user, user],
  );
  return rows[0]?.id as string | undefined;
}

/**
 * `model: "agent/<agentId>"`: a managed-agent turn answered as a chat completion. The session:
 * `user` continues the newest session this surface opened for that user on that agent (a new
 * one the first time); without `user` every request opens a session of its own. A new session's
 * turn is seeded with the request's earlier messages; a continued one sees its own history (the
 * agent's memory setting decides, as for native turns). Trailing `tool` messages answer the
 * integrator-owned calls a paused turn surfaced as `tool_calls` and resume it.
 */
export async function agentCompletion(
  deps: ServerDeps,
  req: OpenAiRequest,
  res: ServerResponse,
  apiKey: string,
  r: CompletionRequest,
): Promise<void> {
  const requestId = req.requestId ?? '';
  try {
    const em = deps.em();
    const principal = await resolveApiKey(em, apiKey);
    if (!principal) throw appError('INVALID_API_KEY');
    req.principal = principal;
    // `tools` may name the agent's integrator-owned tools (frameworks send the tools they run);
    // the definitions the model sees stay the agent's. Anything else is the agent's to decide.
    const first = r.options.find(
      (o) => o !== 'tools' && !(o === 'tool_choice' && r.passthrough.tool_choice === 'auto'),
    );
    if (first !== undefined)
      throw unsupported(first, "is not supported for agent models: the agent's configuration decides");
    const agentId = r.agentId as string;
    const svc = new AgentTurns(em, { ...deps, metering: deps.poolMetering } as AgentDeps, principal);
    if (!isUuid(agentId)) throw modelNotFound(r.model);
    const agent = await svc.requireAgent(agentId).catch((err: unknown) => {
      throw err instanceof AppError && err.status === 404 ? modelNotFound(r.model) : err;
    });
    const own = new Set(
      effectiveConfig(agent.config)
        .customTools.filter((t) => !t.callbackUrl)
        .map((t) => t.name),
    );
    for (const [i, t] of (r.passthrough.tools ?? []).entries()) {
      if (!own.has(t.function.name)) {
        throw invalidRequest(
          `The tool '${t.function.name}' is not an integrator-owned tool of ${r.model} (its customTools without callbackUrl).`,
          `tools[${i}].function.name`,
          'invalid_value',
        );
      }
    }

    let tail = r.messages.length;
    while (tail > 0 && r.messages[tail - 1]?.role === 'tool') tail--;
    let sessionId: string;
    let runId: string;
    /** Tool calls whose `tool_call.completed` events end the replay of a resumed turn. */
    let resumeAfter: Set<string> | undefined;
    if (tail < r.messages.length) {
      ({ sessionId, runId } = await resumeTurn(em, svc, principal, agentId, r, tail));
      resumeAfter = new Set(r.messages.slice(tail).map((m) => (m as { toolCallId: string }).toolCallId));
    } else {
      const last = r.messages[r.messages.length - 1] as LlmMessage;
      if (last.role !== 'user') {
        throw invalidRequest(
          `The last message of a request to an agent model must be a \`user\` message, or \`tool\` messages answering its pending tool calls.`,
          `messages[${r.messages.length - 1}].role`,
          'invalid_value',
        );
      }
      let existing = r.user ? await userSession(em, principal.workspaceId, agentId, r.user) : undefined;
      const seeded = existing === undefined;
      if (!existing) {
        // Refused for credits before a session is opened (a native turn checks them too).
        await deps.poolMetering.assertCredits(principal.workspaceId);
        const s = await svc.createSession(agentId, {
          metadata: r.user ? { openai_user: r.user } : { openai: 'request' },
          ...(r.user ? { end_user_id: r.user } : {}),
        });
        existing = s.id;
      }
      sessionId = existing;
      const opened = sessionId;
      const run = await svc
        .startTurn(
          sessionId,
          {
            message: last.content,
            concurrency: 'reject',
            ...(seeded ? { history: r.messages.slice(0, -1) } : {}),
          },
          { requestId },
        )
        .catch(async (err: unknown) => {
          // A turn refused (rate limit, credits) leaves no empty session behind.
          if (seeded) await svc.deleteSession(opened).catch(() => undefined);
          throw err;
        });
      runId = run.id;
    }
    const headers = { ...withOpenAiRateHeaders(svc.rateHeaders), [SESSION_HEADER]: sessionId };
    await answerTurn(deps, em, res, r, runId, headers, resumeAfter);
  } catch (err) {
    const e = toOpenAiError(err);
    if (e.status >= 500) deps.log.error({ err, requestId }, 'agent completion failed');
    sendOpenAiError(res, e);
  }
}

/**
 * Hands the trailing `tool` messages to the paused turn they answer, with the tool-results
 * endpoint's rules: an id this workspace does not know is 404 (another workspace's included),
 * a call of another agent or another `user`'s session, one that is not pending, or a turn left
 * with calls unanswered is 400. Nothing is submitted unless every message is accepted.
 */
async function resumeTurn(
  em: EntityManager,
  svc: AgentTurns,
  principal: Principal,
  agentId: string,
  r: CompletionRequest,
  tail: number,
): Promise<{ sessionId: string; runId: string }> {
  const answers = r.messages.slice(tail) as Extract<LlmMessage, { role: 'tool' }>[];
  let runId: string | undefined;
  let sessionId: string | undefined;
  const seen = new Set<string>();
  for (const [j, m] of answers.entries()) {
    const param = `messages[${tail + j}].tool_call_id`;
    if (seen.has(m.toolCallId))
      throw invalidRequest(`Duplicate tool_call_id '${m.toolCallId}'.`, param, 'invalid_value');
    seen.add(m.toolCallId);
    const call = await toolCallStore.getToolCall(em, m.toolCallId);
    if (!call || call.workspaceId !== principal.workspaceId) {
      throw new OpenAiError(
        404,
        `Unknown tool_call_id '${m.toolCallId}'.`,
        'invalid_request_error',
        param,
        'tool_call_not_found',
      );
    }
    const session = call.sessionId
      ? await svc.requireSession(call.sessionId).catch(() => undefined)
      : undefined;
    if (!session || session.app_id !== agentId) {
      throw invalidRequest(
        `The tool call '${m.toolCallId}' does not belong to ${r.model}.`,
        param,
        'tool_call_mismatch',
      );
    }
    if (r.user && (session.metadata as Row | undefined)?.openai_user !== r.user) {
      throw invalidRequest(
        `The tool call '${m.toolCallId}' does not belong to this user's session.`,
        param,
        'tool_call_mismatch',
      );
    }
    if (call.status !== 'pending') {
      throw invalidRequest(
        `The tool call '${m.toolCallId}' is not pending (it is ${call.status}).`,
        param,
        'tool_call_not_pending',
      );
    }
    if (runId !== undefined && call.runId !== runId) {
      throw invalidRequest('The tool messages answer calls of different turns.', param, 'tool_call_mismatch');
    }
    runId = call.runId;
    sessionId = session.id;
  }
  const unanswered = (await toolCallStore.toolCallsOfRun(em, runId as string)).filter(
    (c) => c.status === 'pending' && !seen.has(c.id),
  );
  if (unanswered.length > 0) {
    throw invalidRequest(
      `Every pending tool call of the turn must be answered in one request; missing: ${unanswered.map((c) => c.id).join(', ')}.`,
      'messages',
      'tool_calls_unanswered',
    );
  }
  for (const m of answers) {
    await svc.submitToolResult({
      sessionId: sessionId as string,
      toolCallId: m.toolCallId,
      result: toolResult(m.content),
    });
  }
  return { sessionId: sessionId as string, runId: runId as string };
}

/** A tool message's content: its JSON when it is JSON, else the text. */
function toolResult(content: string): unknown {
  try {
    return JSON.parse(content);
  } catch {
    return content;
  }
}

/** A failed turn's `error` event in OpenAI's terms. */
function turnError(code: string | undefined, message: string): OpenAiError {
  if (code === 'INSUFFICIENT_CREDITS')
    return new OpenAiError(429, message, 'insufficient_quota', null, 'insufficient_quota');
  if (code === 'MODEL_UNAVAILABLE')
    return new OpenAiError(503, message, 'server_error', null, 'model_unavailable');
  return new OpenAiError(
    code === 'MODEL_ERROR' ? 502 : 500,
    message,
    'server_error',
    null,
    (code ?? 'turn_failed').toLowerCase(),
  );
}

/**
 * Reads the turn's events and answers: text deltas as content, integrator-owned calls as
 * `tool_calls` (finish `tool_calls`) once the turn has paused on them, the end as `stop`. A
 * client that leaves stops the reading, not the turn (as a native turn's stream).
 */
async function answerTurn(
  deps: ServerDeps,
  em: EntityManager,
  res: ServerResponse,
  r: CompletionRequest,
  runId: string,
  headers: Record<string, string>,
  resumeAfter?: Set<string>,
): Promise<void> {
  const stop = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) stop.abort();
  });
  const writer = r.stream ? new ChunkWriter(res, r.model, r.includeUsage, headers) : undefined;
  const waitingFor = resumeAfter ? new Set(resumeAfter) : undefined;
  let text = '';
  let calls: ToolCall[] = [];
  let failure: OpenAiError | undefined;
  let lastError: { code?: string; message?: string } | undefined;
  let finish: string | undefined;
  let parkCheck: NodeJS.Timeout | undefined;
  const promptTokens = estimateTokens(messageChars(r.messages));

  // Once a call surfaced, the turn is checked for having paused (all its calls are out then).
  const watchPark = () => {
    if (parkCheck) return;
    const tick = async () => {
      const rows = await em
        .fork()
        .execute<Row[]>('select waiting, status from runs where id = ?', [runId])
        .catch(() => []);
      const row = rows[0];
      if (row && row.status === 'running' && (row.waiting === true || row.waiting === 't')) {
        const pending = (await toolCallStore.toolCallsOfRun(em.fork(), runId)).filter(
          (c) => c.status === 'pending',
        );
        calls = pending.map((c) => ({
          id: c.id,
          name: c.name,
          arguments: JSON.stringify(c.arguments ?? {}),
        }));
        finish = 'tool_calls';
        stop.abort();
        return;
      }
      if (!stop.signal.aborted && !finish) parkCheck = setTimeout(tick, PARK_POLL_MS);
    };
    parkCheck = setTimeout(tick, PARK_POLL_MS);
  };

  const onEvent = (ev: RunEvent) => {
    const p = ev.payload as Row;
    if (waitingFor) {
      // Replaying a resumed turn: everything up to the answers' `tool_call.completed` was said.
      if (waitingFor.size > 0) {
        if (ev.type === 'tool_call.completed') waitingFor.delete(String(p.toolCallId));
        return;
      }
    }
    switch (ev.type) {
      case 'message.delta': {
        const t = String(p.content ?? '');
        text += t;
        writer?.text(t);
        break;
      }
      case 'tool_call.pending':
        watchPark();
        break;
      case 'error':
        lastError = { code: p.code as string | undefined, message: p.message as string | undefined };
        break;
      case 'run.completed':
        finish = 'stop';
        break;
      case 'run.failed':
        failure = turnError(lastError?.code, lastError?.message ?? String(p.error ?? 'The turn failed'));
        break;
      case 'run.cancelled':
        failure = new OpenAiError(500, 'The turn was cancelled', 'server_error', null, 'turn_cancelled');
        break;
    }
  };

  try {
    for await (const ev of deps.runs.stream(runId, 0, stop.signal)) {
      onEvent(ev);
      if (finish || failure) break;
    }
  } catch (err) {
    if (!stop.signal.aborted) failure = toOpenAiError(err);
  } finally {
    if (parkCheck) clearTimeout(parkCheck);
  }
  if (res.destroyed || (!finish && !failure)) return;
  if (failure) {
    if (writer?.headersSent) writer.fail(failure);
    else sendOpenAiError(res, failure);
    return;
  }
  const reason = finish as string;
  const toolChars = calls.reduce((n, c) => n + c.name.length + c.arguments.length, 0);
  const usage = usageOf(promptTokens, estimateTokens(text.length + toolChars));
  if (writer) {
    for (const [i, c] of calls.entries()) writer.toolCall(i, c);
    writer.finish(reason, usage);
    return;
  }
  const body = JSON.stringify(
    completionObject({ model: r.model, text, toolCalls: calls, finishReason: reason, usage }),
  );
  res.writeHead(200, {
    ...headers,
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': String(Buffer.byteLength(body)),
  });
  res.end(body);
}
