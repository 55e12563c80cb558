import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { hashApiKey } from '../../auth/api-keys.js';
import { apiKeyPrincipal, type Principal } from '../../auth/principal.js';
import type { SqlExecutor } from '../../db/sql.js';
import { AppError, appError } from '../../errors/index.js';
import { type GenerationStatus, MeteredCall } from '../../generation/metered-call.js';
import { insufficientCredits } from '../../metering/credits.js';
import { rateLimitCteParams, rateLimitHeaders, shardedRateLimit } from '../../metering/rate-limit.js';
import type { GenerationMeter, Metering, StatementHold } from '../../metering/types.js';
import type { LlmMessage, LlmProvider, LlmUsage, ModelCatalog, ModelInfo } from '../../providers/llm.js';
import { type AdmissionRow, admission, HOLD_GUESSES, maxTokensJson, truthy } from './chat-admission.js';
import { endTurn, type TurnMessage } from './chat-end.js';
import { buildPrompt, estimateUsage, identityMetadata, promptChars } from './chat-prompt.js';
import type { ChatMessageInput, ChatResponse, ChatStreamEvent } from './schema.js';
import { type AppRow, appControls, appNotFound, isUuid, threadNotFound } from './service.js';

export {
  buildPrompt,
  DEFAULT_MAX_CONTEXT_MESSAGES,
  DEFAULT_SYSTEM_PROMPT,
  estimateUsage,
} from './chat-prompt.js';

/**
 * What app chat needs beyond the request. Its statements run on the plain pool (`db/sql.ts`)
 * with the pool's metering (usage records batched), off the ORM: this is a hot path.
 */
export interface ChatDeps {
  llm: LlmProvider;
  models: ModelCatalog;
  metering: Metering;
  db: SqlExecutor;
  log: Logger;
}

/** The pool-backed `ChatDeps` of a server. */
export const appChatDeps = (deps: {
  llm: LlmProvider;
  models: ModelCatalog;
  poolMetering: Metering;
  db: { sql: SqlExecutor };
  log: Logger;
}): ChatDeps => ({
  llm: deps.llm,
  models: deps.models,
  metering: deps.poolMetering,
  db: deps.db.sql,
  log: deps.log,
});

/** A turn admitted and its credits held, its prompt built; the model is not called yet. */
export interface PreparedTurn {
  principal: Principal;
  app: AppRow;
  model: ModelInfo;
  /** The thread's id: an existing one, or the one the turn creates when it ends. */
  threadId: string;
  /** Merged into the thread's metadata (`external_user_id`, …). */
  identity: Record<string, string>;
  sessionId: string | null;
  turnId: string;
  message: string;
  callerRole: string;
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

const tokenEvent = (content: string): ChatRunEvent => ({ type: 'token', content });
const newTurnId = () => `turn_${randomUUID().replaceAll('-', '')}`;

/** Who is calling: an API key not resolved yet (resolved by the admission statement), or a principal. */
export type AppChatCaller = { apiKey: string } | { principal: Principal };

/** App chat (spec 4.6 / 6.2): one turn = user message stored, model streamed, reply stored, credits debited. */
export class AppChatService {
  constructor(
    private readonly deps: ChatDeps,
    private readonly requestId: string,
  ) {}

  /**
   * Everything that can fail before the model is called, as plain errors (so a stream answers
   * with a JSON error status, not an event), in ONE statement: the admission (key, app, thread
   * and history, rate limit) with the credit hold (sized from what the app had at its last
   * turn in this process, checked by the statement; the first turn of an app in a process, or
   * after the app's model, system prompt or `maxTokens` changed, takes the hold in a second
   * statement). In order: 401 (key), the body's 400 (`invalid`), 401 `Unauthorized or app not
   * found`, the model's 400/503, 429, 404 `Thread not found`, 402 `Insufficient credits`
   * (nothing held or written). Nothing is stored yet: the thread and the messages are written
   * with the settlement in one statement when the turn ends (`run`).
   */
  async prepare(
    caller: AppChatCaller,
    appId: string,
    input: ChatMessageInput | undefined,
    endpoint: string,
    invalid?: AppError,
    onPrincipal?: (principal: Principal) => void,
  ): Promise<PreparedTurn> {
    const given = 'principal' in caller ? caller.principal : undefined;
    const subject = given?.widgetSubject;
    const rule = this.deps.metering.settings.rateLimits.app_chat;
    const limited = !invalid && !!rule && rule.limit > 0;
    const w = rule?.windowSeconds ?? 60;
    const scopedOut = !isUuid(appId) || (given?.appId !== undefined && given.appId !== appId);
    const threadParam = input?.threadId !== undefined && isUuid(input.threadId) ? input.threadId : null;
    const newThreadId = randomUUID();
    // The hold, sized before the statement from what the app had last time.
    const guess = !invalid && input && !scopedOut ? HOLD_GUESSES.get(appId) : undefined;
    let hold: StatementHold | undefined;
    let guessed: ModelInfo | undefined;
    if (guess && input) {
      try {
        guessed = this.deps.models.resolve('chat', guess.model_id);
      } catch {
        guessed = undefined;
      }
      if (guessed) {
        hold = this.deps.metering.holdInStatement(
          {
            appId,
            threadId: threadParam ?? newThreadId,
            requestId: this.requestId,
            endpoint,
            model: guessed,
            meter: 'credits',
          },
          {
            inputChars: promptChars(buildPrompt(guess, input, [])),
            maxTokens: { ...appControls(guess), ...(input.controls ?? {}) }.maxTokens,
          },
        );
      }
    }
    const sharded = shardedRateLimit(limited, rule?.limit ?? 0);
    const rows = await this.deps.db.execute<AdmissionRow[]>(admission(!given, !!subject, hold, sharded), [
      ...('apiKey' in caller
        ? [hashApiKey(caller.apiKey)]
        : [(given as Principal).keyId ?? null, (given as Principal).workspaceId]),
      scopedOut ? null : appId,
      threadParam,
      ...(subject ? [subject] : []),
      input?.controls?.maxContextMessages ?? null,
      ...rateLimitCteParams('app_chat:', w, sharded, [limited]),
      ...(hold && guess
        ? [
            input?.sessionId ?? null,
            guess.model_id,
            guess.system_prompt,
            maxTokensJson(guess),
            limited,
            rule?.limit ?? 0,
            input?.threadId !== undefined,
            ...hold.params,
          ]
        : []),
    ]);
    const row = rows[0];
    if (!row) throw appError('INVALID_API_KEY');
    const principal =
      given ??
      apiKeyPrincipal({
        id: row.key_id as string,
        name: row.key_name,
        workspace_id: row.workspace_id,
        workspace_name: row.workspace_name ?? '',
      });
    const thread0 = row.thread;
    const meterInput = (model: ModelInfo, app: AppRow) => ({
      workspaceId: principal.workspaceId,
      apiKeyId: principal.keyId ?? null,
      appId: app.id,
      threadId: thread0?.id ?? newThreadId,
      sessionId: thread0?.session_id ?? input?.sessionId ?? null,
      requestId: this.requestId,
      endpoint,
      model,
      meter: 'credits' as const,
      insufficientVariant: 'appsChat' as const,
    });
    // The hold the statement took (it did only when every check below passes).
    const tried = hold !== undefined && truthy(row.hold_tried);
    const held = tried && row.held !== null && row.held !== undefined ? Number(row.held) : undefined;
    let meter: GenerationMeter | undefined;
    try {
      onPrincipal?.(principal);
      if (invalid || !input) throw invalid ?? appError('INVALID_REQUEST_BODY');
      const app = row.app;
      if (!app) throw appNotFound();
      // What the app's next turn sizes its hold from (whatever this turn's outcome).
      if (!tried) HOLD_GUESSES.set(app.id, app);
      const model = this.deps.models.resolve('chat', app.model_id);
      const headers =
        limited && rule ? rateLimitHeaders(rule, Number(row.hits), Number(row.reset_in), 'app_chat') : {};
      if (input.threadId !== undefined && !thread0) throw threadNotFound();
      const controls = { ...appControls(app), ...(input.controls ?? {}) };
      const messages = buildPrompt(app, input, row.history ?? []);
      const inputTokens = estimateUsage(messages, '').inputTokens;
      if (held !== undefined && hold) {
        meter = hold.adopt(meterInput(model, app), held, inputTokens);
      } else if (tried) {
        throw insufficientCredits('appsChat');
      } else {
        // 402 `Insufficient credits` up front, holding the prompt's cost and the expected
        // reply (capped by maxTokens); topped up while a longer reply streams.
        meter = await this.deps.metering.startGeneration(meterInput(model, app), {
          inputTokens,
          maxTokens: controls.maxTokens,
        });
      }
      return {
        principal,
        app,
        model,
        threadId: thread0?.id ?? newThreadId,
        identity: identityMetadata(input, principal),
        sessionId: input.sessionId ?? null,
        turnId: newTurnId(),
        message: input.message,
        callerRole: input.role,
        messages,
        temperature: controls.temperature,
        maxTokens: controls.maxTokens,
        endpoint,
        meter,
        headers,
      };
    } catch (err) {
      // Not reached with a hold taken (it is taken only when every check passes); if it is,
      // the hold goes back whole.
      if (held !== undefined && hold && guessed && !meter) {
        await hold
          .adopt(meterInput(guessed, { id: appId } as AppRow), held, 0)
          .release()
          .catch((e) => this.deps.log.error({ err: e }, 'app chat: could not release a hold'));
      }
      throw err;
    }
  }

  /**
   * Calls the model (a `MeteredCall`: deltas counted on the turn's hold, topped up mid-stream)
   * and yields the spec's stream events. Always ends with `done` or `error`; on failure the
   * user message is stored marked `error` (or `aborted` when the caller left). The hold is
   * settled once, by the statement that ends the turn (`endTurn`), or `aborted` when the
   * consumer stops early.
   */
  async *run(turn: PreparedTurn, signal?: AbortSignal): AsyncGenerator<ChatRunEvent> {
    const call = new MeteredCall(this.deps.llm, turn.meter, signal);
    try {
      const started = Date.now();
      try {
        yield* call.events(
          {
            model: turn.model,
            messages: turn.messages,
            temperature: turn.temperature,
            maxTokens: turn.maxTokens,
          },
          tokenEvent,
        );
      } catch (err) {
        const status = call.failure(err);
        const appErr = err instanceof AppError ? err : appError('MODEL_ERROR');
        const code = appErr.code === 'INSUFFICIENT_CREDITS' ? 'INSUFFICIENT_CREDITS' : 'MODEL_ERROR';
        await call
          .settle(status, (s) => this.fail(turn, s, code, Date.now() - started))
          .catch((e) => this.deps.log.error({ err: e }, 'app chat: could not store the failed turn'));
        if (status !== 'aborted')
          this.deps.log.warn({ err, turnId: turn.turnId }, 'app chat: model call failed');
        yield { type: 'error', code, message: appErr.message, cause: appErr };
        return;
      }
      const latencyMs = Date.now() - started;
      // The upstream's usage is on the meter already; without it, the ~4 characters a token estimate.
      const tokens = call.usage ?? estimateUsage(turn.messages, call.text);
      if (!call.usage) turn.meter.addUsage(tokens);
      const done = await call.settle('success', () => this.succeed(turn, call.text, tokens, latencyMs));
      if (done) yield done;
    } finally {
      // A consumer that stops early still settles the hold (a no-op once the turn settled it).
      await call.settle('aborted').catch(() => {});
    }
  }

  /** The non-streaming endpoint: the same turn, collected. */
  async complete(
    principal: Principal,
    input: ChatMessageInput,
    endpoint: string,
    headersOut: Record<string, string> = {},
  ): Promise<ChatResponse> {
    const turn = await this.prepare({ principal }, input.appId, input, endpoint);
    Object.assign(headersOut, turn.headers);
    let content = '';
    for await (const ev of this.run(turn)) {
      if (ev.type === 'token') content += ev.content;
      else if (ev.type === 'error') throw ev.cause ?? appError('MODEL_ERROR');
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
    throw appError('MODEL_ERROR');
  }

  private userMessage(turn: PreparedTurn, status: string, extra: Partial<TurnMessage> = {}): TurnMessage {
    return {
      role: 'user',
      content: turn.message,
      providerStatus: status,
      metadata: { callerRole: turn.callerRole },
      ...extra,
    };
  }

  private async succeed(
    turn: PreparedTurn,
    text: string,
    usage: LlmUsage,
    latencyMs: number,
  ): Promise<Extract<ChatStreamEvent, { type: 'done' }>> {
    const costMicros = turn.meter.costMicros();
    await endTurn(
      this.deps,
      this.requestId,
      turn,
      [
        this.userMessage(turn, 'success'),
        {
          role: 'assistant',
          content: text,
          providerStatus: 'success',
          latencyMs,
          inputTokens: usage.inputTokens,
          outputTokens: usage.outputTokens,
          costMicros,
          metadata: { model: turn.model.id, ...(usage.estimated ? { usageEstimated: true } : {}) },
        },
      ],
      'success',
    );
    const window = turn.model.contextWindow > 0 ? usage.inputTokens / turn.model.contextWindow : 0;
    return {
      type: 'done',
      threadId: turn.threadId,
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

  private async fail(turn: PreparedTurn, status: GenerationStatus, code: string, latencyMs: number) {
    // Streamed output so far is charged (the upstream produced it); input is unknown.
    await endTurn(
      this.deps,
      this.requestId,
      turn,
      [this.userMessage(turn, status, { errorCode: code, latencyMs })],
      status,
    );
  }
}
