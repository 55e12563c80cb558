import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { Principal } from '../../auth/principal.js';
import { AppError } from '../../http/errors.js';
import type { GenerationMeter, Metering } from '../../metering/types.js';
import type { LlmMessage, LlmProvider, LlmUsage, ModelCatalog, ModelInfo } from '../../providers/llm.js';
import type { ChatMessageInput, ChatResponse, ChatStreamEvent } from './schema.js';
import {
  type AppRow,
  AppsService,
  appControls,
  appendMessages,
  MemoryService,
  type ThreadRow,
} from './service.js';

/** What app chat needs beyond the database. */
export interface ChatDeps {
  llm: LlmProvider;
  models: ModelCatalog;
  metering: Metering;
  log: Logger;
}

export const DEFAULT_SYSTEM_PROMPT = 'You are a helpful assistant.';
export const DEFAULT_MAX_CONTEXT_MESSAGES = 20;
const CONTEXT_JSON_LIMIT = 4000;
const HISTORY_ITEM_LIMIT = 8000;
export const INSUFFICIENT_CREDITS = 'Insufficient credits';

/** A turn whose user message is stored and whose prompt is built; the model is not called yet. */
export interface PreparedTurn {
  app: AppRow;
  model: ModelInfo;
  thread: ThreadRow;
  turnId: string;
  userMessageId: string;
  messages: LlmMessage[];
  temperature?: number;
  maxTokens?: number;
  endpoint: string;
  meter: GenerationMeter;
  /** Rate-limit headers for the successful response. */
  headers: Record<string, string>;
}

/** An error event with the failure behind it (the sync endpoint rethrows it). */
export type ChatRunEvent = ChatStreamEvent & { cause?: AppError };

const truncate = (s: string, n: number) => (s.length > n ? `${s.slice(0, n)}…` : s);

function contextBlock(label: string, value: Record<string, unknown> | undefined): string | undefined {
  if (!value || Object.keys(value).length === 0) return undefined;
  return `${label}:\n${truncate(JSON.stringify(value), CONTEXT_JSON_LIMIT)}`;
}

/** The prompt: app prompt and contexts, seeded history, the thread's recent messages, the message. */
export function buildPrompt(
  app: AppRow,
  input: ChatMessageInput,
  threadHistory: { role: string; content: string }[],
): LlmMessage[] {
  const system = [
    app.system_prompt?.trim() || DEFAULT_SYSTEM_PROMPT,
    `The person writing has the role: ${input.role}.`,
    contextBlock('Lesson context', input.lessonContext),
    contextBlock('Session context', input.sessionContext),
    contextBlock('Page context', input.pageContext),
  ]
    .filter(Boolean)
    .join('\n\n');
  const out: LlmMessage[] = [{ role: 'system', content: system }];
  // Callers cannot inject system instructions through history: anything not `assistant` is `user`.
  const asTurn = (m: { role: string; content: string }): LlmMessage =>
    m.role === 'assistant'
      ? { role: 'assistant', content: truncate(m.content, HISTORY_ITEM_LIMIT) }
      : { role: 'user', content: truncate(m.content, HISTORY_ITEM_LIMIT) };
  for (const m of input.chatHistory ?? []) out.push(asTurn(m));
  for (const m of threadHistory) out.push(asTurn(m));
  out.push({ role: 'user', content: input.message });
  return out;
}

const newTurnId = () => `turn_${randomUUID().replaceAll('-', '')}`;

/** App chat (spec 4.6 / 6.2): one turn = user message stored, model streamed, reply stored, credits debited. */
export class AppChatService {
  constructor(
    private readonly em: EntityManager,
    private readonly principal: Principal,
    private readonly deps: ChatDeps,
    private readonly requestId: string,
  ) {}

  /**
   * Everything that can fail before the model is called, as plain errors (so a stream answers
   * with a JSON error status, not an event): app, model, credits, thread. Stores the user message.
   */
  async prepare(input: ChatMessageInput, endpoint: string): Promise<PreparedTurn> {
    const app = await new AppsService(this.em, this.principal).require(input.appId);
    const model = this.deps.models.resolve('chat', app.model_id);
    const headers = await this.deps.metering.rateLimit(this.principal.workspaceId, 'app_chat');
    const memory = new MemoryService(this.em, this.principal);
    const thread0 =
      input.threadId !== undefined ? await memory.findThread(this.em, app.id, input.threadId) : undefined;
    const threadId = thread0?.id ?? randomUUID();
    const controls = { ...appControls(app), ...(input.controls ?? {}) };
    const maxContext = controls.maxContextMessages ?? DEFAULT_MAX_CONTEXT_MESSAGES;
    const turnId = newTurnId();
    const history =
      thread0 && maxContext > 0
        ? (
            await this.em.execute<{ role: string; content: string }[]>(
              `select role, content from app_thread_messages
                where thread_id = ? and provider_status not in ('error', 'aborted', 'pending')
                order by sequence_number desc limit ?`,
              [thread0.id, maxContext],
            )
          ).reverse()
        : [];
    const messages = buildPrompt(app, input, history);
    // 402 `Insufficient credits` up front, holding the prompt's cost and the expected reply
    // (capped by maxTokens); topped up while a longer reply streams.
    const meter = await this.deps.metering.startGeneration(
      {
        workspaceId: this.principal.workspaceId,
        apiKeyId: this.principal.keyId ?? null,
        appId: app.id,
        threadId,
        sessionId: thread0?.session_id ?? input.sessionId ?? null,
        requestId: this.requestId,
        endpoint,
        model,
        meter: 'credits',
        insufficientMessage: INSUFFICIENT_CREDITS,
      },
      { inputTokens: estimateUsage(messages, '').inputTokens, maxTokens: controls.maxTokens },
    );

    try {
      return await this.em.transactional(async (tx) => {
        let thread: ThreadRow;
        if (thread0) {
          thread = await memory.findThread(tx, app.id, thread0.id);
        } else {
          thread = await memory.insertThread(tx, app.id, { sessionId: input.sessionId ?? null }, threadId);
        }
        const identity = this.identityMetadata(input);
        if (Object.keys(identity).length > 0 || (input.sessionId && !thread.session_id)) {
          const rows = await tx.execute<ThreadRow[]>(
            `update app_threads set metadata = metadata || ?::jsonb, session_id = coalesce(session_id, ?)
              where id = ? returning *`,
            [JSON.stringify(identity), input.sessionId ?? null, thread.id],
          );
          thread = rows[0] as ThreadRow;
        }
        const { ids } = await appendMessages(
          tx,
          { id: thread.id, workspaceId: thread.workspace_id, appId: app.id },
          [
            {
              role: 'user',
              content: input.message,
              requestId: this.requestId,
              turnId,
              providerStatus: 'pending',
              metadata: { callerRole: input.role },
            },
          ],
        );
        return {
          app,
          model,
          thread,
          turnId,
          userMessageId: ids[0] as string,
          messages,
          temperature: controls.temperature,
          maxTokens: controls.maxTokens,
          endpoint,
          meter,
          headers,
        };
      });
    } catch (err) {
      // Nothing was sent upstream: the hold goes back whole, with no usage record.
      await meter.release().catch(() => {});
      throw err;
    }
  }

  /** `external_user_id` / `anonymous_visitor_id` for insights' `user_key`; a subject-bound token wins. */
  private identityMetadata(input: ChatMessageInput): Record<string, string> {
    const out: Record<string, string> = {};
    const ext = input.externalIdentity;
    if (ext?.externalUserId) out.external_user_id = ext.externalUserId;
    if (ext?.anonymousVisitorId) out.anonymous_visitor_id = ext.anonymousVisitorId;
    if (ext?.role) out.external_user_role = ext.role;
    if (this.principal.widgetSubject) out.external_user_id = this.principal.widgetSubject;
    return out;
  }

  /**
   * Calls the model and yields the spec's stream events. Always ends with `done` or `error`;
   * on failure the user message stays, marked `error` (or `aborted` when the caller left).
   */
  async *run(turn: PreparedTurn, signal?: AbortSignal): AsyncGenerator<ChatRunEvent> {
    try {
      yield* this.runTurn(turn, signal);
    } finally {
      // A consumer that stops early still settles the hold (a no-op once the turn finished it).
      await turn.meter.finish('aborted').catch(() => {});
    }
  }

  private async *runTurn(turn: PreparedTurn, signal?: AbortSignal): AsyncGenerator<ChatRunEvent> {
    const started = Date.now();
    let text = '';
    let usage: LlmUsage | undefined;
    try {
      for await (const part of this.deps.llm.stream({
        model: turn.model,
        messages: turn.messages,
        temperature: turn.temperature,
        maxTokens: turn.maxTokens,
        signal,
      })) {
        if (part.type === 'text' && part.text) {
          text += part.text;
          yield { type: 'token', content: part.text };
          if (turn.meter.addStreamedChars(part.text.length)) await turn.meter.check();
        } else if (part.type === 'usage') {
          usage = part.usage;
        }
      }
    } catch (err) {
      const aborted = signal?.aborted === true;
      const appErr =
        err instanceof AppError
          ? err
          : new AppError(502, 'AI service is temporarily unavailable', 'MODEL_ERROR');
      const code = appErr.code === 'INSUFFICIENT_CREDITS' ? 'INSUFFICIENT_CREDITS' : 'MODEL_ERROR';
      await this.fail(turn, aborted ? 'aborted' : 'error', code, Date.now() - started).catch((e) =>
        this.deps.log.error({ err: e }, 'app chat: could not mark the turn failed'),
      );
      if (!aborted) this.deps.log.warn({ err, turnId: turn.turnId }, 'app chat: model call failed');
      yield { type: 'error', code, message: appErr.message, cause: appErr };
      return;
    }
    const latencyMs = Date.now() - started;
    const tokens = usage ?? estimateUsage(turn.messages, text);
    turn.meter.addUsage(tokens);
    const done = await this.succeed(turn, text, tokens, latencyMs);
    yield done;
  }

  /** The non-streaming endpoint: the same turn, collected. */
  async complete(
    input: ChatMessageInput,
    endpoint: string,
    headersOut: Record<string, string> = {},
  ): Promise<ChatResponse> {
    const turn = await this.prepare(input, endpoint);
    Object.assign(headersOut, turn.headers);
    let content = '';
    for await (const ev of this.run(turn)) {
      if (ev.type === 'token') content += ev.content;
      else if (ev.type === 'error') throw ev.cause ?? new AppError(502, ev.message, ev.code);
      else if (ev.type === 'done') {
        return {
          threadId: ev.threadId,
          turnId: ev.turnId,
          content,
          role: 'assistant',
          metadata: ev.metadata,
          contextWindow: ev.contextWindow,
        };
      }
    }
    throw new AppError(502, 'AI service is temporarily unavailable', 'MODEL_ERROR');
  }

  private async succeed(
    turn: PreparedTurn,
    text: string,
    usage: LlmUsage,
    latencyMs: number,
  ): Promise<Extract<ChatStreamEvent, { type: 'done' }>> {
    const ws = this.principal.workspaceId;
    const costMicros = turn.meter.costMicros();
    await this.em.transactional(async (tx) => {
      await appendMessages(tx, { id: turn.thread.id, workspaceId: ws, appId: turn.app.id }, [
        {
          role: 'assistant',
          content: text,
          requestId: this.requestId,
          turnId: turn.turnId,
          providerStatus: 'success',
          latencyMs,
          inputTokens: usage.inputTokens,
          outputTokens: usage.outputTokens,
          costMicros,
          metadata: { model: turn.model.id, ...(usage.estimated ? { usageEstimated: true } : {}) },
        },
      ]);
      await tx.execute(`update app_thread_messages set provider_status = 'success' where id = ?`, [
        turn.userMessageId,
      ]);
    });
    await turn.meter.finish('success');
    const window = turn.model.contextWindow > 0 ? usage.inputTokens / turn.model.contextWindow : 0;
    return {
      type: 'done',
      threadId: turn.thread.id,
      turnId: turn.turnId,
      contextWindow: { utilization: Math.min(1, Math.max(0, window)) },
      metadata: {
        model: turn.model.id,
        tokensUsed: {
          input: usage.inputTokens,
          output: usage.outputTokens,
          total: usage.inputTokens + usage.outputTokens,
        },
        latencyMs,
      },
    };
  }

  private async fail(turn: PreparedTurn, status: 'error' | 'aborted', code: string, latencyMs: number) {
    await this.em.execute(
      `update app_thread_messages set provider_status = ?, error_code = ?, latency_ms = ? where id = ?`,
      [status, code, Math.max(0, Math.round(latencyMs)), turn.userMessageId],
    );
    // Streamed output so far is charged (the upstream produced it); input is unknown.
    await turn.meter.finish(status);
  }
}

/** About 4 characters per token (spec 8), when the upstream reports no usage. */
export function estimateUsage(messages: LlmMessage[], reply: string): LlmUsage {
  const promptChars = messages.reduce((n, m) => n + (m.content?.length ?? 0), 0);
  return {
    inputTokens: Math.ceil(promptChars / 4),
    outputTokens: Math.ceil(reply.length / 4),
    estimated: true,
  };
}
