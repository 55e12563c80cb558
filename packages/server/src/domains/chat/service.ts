import { hashApiKey } from '../../auth/api-keys.js';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { AppError, appError } from '../../errors/index.js';
import { estimatorKey } from '../../metering/estimator.js';
import type { FirstReplyTicket } from '../../metering/first-reply.js';
import type { LlmMessage, ModelInfo } from '../../providers/llm.js';
import { estimateTokens, messageChars } from '../../providers/tokens.js';
import { WarmKeys } from './early-call.js';
import { type ChatRequestInput, parseChatRequest } from './schema.js';

export const CHAT_ENDPOINT = '/chat';

/** The keys of this process that may start their model call before admission answers. */
const WARM = new WarmKeys();

export interface PreparedChat {
  /** Endpoint of the usage record and of the reply-length estimate (`/chat` unless told). */
  endpoint: string;
  model: ModelInfo;
  messages: LlmMessage[];
  /** RateLimit-* headers for the successful response. */
  headers: Record<string, string>;
  /** Billing cycle of the token quota, read in the same round trip as the rate limit. */
  cycleStart: Date;
  /** The quota reservation taken at admission (released by the usage record). */
  reservationId: string | null;
  /** The process's first reply of this model: `done()` once its usage is recorded (`FirstReplyGate`). */
  firstReply?: FirstReplyTicket;
}

/**
 * How another route doing `/chat`'s work (the OpenAI-compatible surface) reads its body: the
 * messages and model, or the 400 it earns (thrown), and the endpoint its usage is recorded under.
 */
export interface ChatParse {
  parse(body: unknown): { messages: LlmMessage[]; model: ModelInfo };
  endpoint: string;
}

const NATIVE_PARSE = (deps: ServerDeps): ChatParse => ({
  parse(body) {
    const input: ChatRequestInput = parseChatRequest(body);
    return { messages: input.messages, model: deps.models.resolve('chat', input.model) };
  },
  endpoint: CHAT_ENDPOINT,
});

/**
 * `/chat` (spec 4.1): token-metered against the workspace's monthly quota, rate limited per
 * workspace. The route streams; this holds the checks and the accounting, no req/res. Its
 * statements run on the plain pool (`db/sql.ts`), off the ORM: this is the hot path.
 */
export class ChatService {
  private readonly native: ChatParse;
  constructor(private readonly deps: ServerDeps) {
    this.native = NATIVE_PARSE(deps);
  }

  /**
   * Everything before the upstream call, with one database statement: 401 `Invalid API key`,
   * then the body's 400s (`bodyError` from reading it, then `parseChatRequest`) and the
   * model's 400/503, then 429, then 403 `Token limit exceeded`. A request refused with a 400
   * spends no rate-limit unit.
   */
  async prepare(
    /** A well-formed `svc_ai_` key (the route refuses malformed ones before reading the body). */
    apiKey: string,
    body: unknown,
    bodyError?: AppError,
    /** Told who is calling as soon as the key resolves (the access log's workspace, also on a 400). */
    onPrincipal?: (principal: Principal) => void,
    /** How the body is read (default: `/chat`'s rules). */
    how: ChatParse = this.native,
    /**
     * Called, before the admission statement answers, with a valid request of a key whose last
     * admission here passed (`WarmKeys`): the route may start the model call then, holding its
     * output until this resolves (`EarlyCall`). When this throws, the route cancels that call.
     */
    early?: (input: { model: ModelInfo; messages: LlmMessage[] }) => void,
  ): Promise<{ principal: Principal; prepared: PreparedChat }> {
    let invalid: AppError | undefined;
    let input: { messages: LlmMessage[] } | undefined;
    let model: ModelInfo | undefined;
    try {
      if (bodyError) throw bodyError;
      ({ model, ...input } = how.parse(body));
    } catch (err) {
      // The parser and the model catalog throw only AppErrors; anything else is a defect.
      invalid = err instanceof AppError ? err : appError('INTERNAL_ERROR');
    }
    // The first requests of a model wait for its first reply to be known (`FirstReplyGate`).
    const ticket = input && model ? this.firstReply(model, how.endpoint) : undefined;
    const firstReply = ticket instanceof Promise ? await ticket : ticket;
    try {
      // The quota reservation: the prompt (~4 characters per token) plus the expected reply.
      const reserve = input && model ? this.reserveFor(input.messages, model, how.endpoint) : 1;
      const keyHash = hashApiKey(apiKey);
      const admitting = this.deps.poolMetering.admitKeyRequest(keyHash, 'chat', !invalid, reserve);
      if (early && input && model && !invalid && WARM.take(keyHash))
        early({ model, messages: input.messages });
      const admission = await admitting;
      if (!admission) {
        WARM.forget(keyHash);
        throw appError('INVALID_API_KEY');
      }
      onPrincipal?.(admission.principal);
      if (invalid || !input || !model) throw invalid ?? appError('INVALID_REQUEST_BODY');
      let headers: Record<string, string>;
      try {
        headers = admission.limit();
        admission.quota();
      } catch (err) {
        WARM.forget(keyHash);
        throw err;
      }
      // A reservation means a token quota: such a workspace's requests never start early.
      if (admission.reservationId) WARM.forget(keyHash);
      else WARM.admitted(keyHash, Number(headers['RateLimit-Remaining'] ?? Number.POSITIVE_INFINITY));
      return {
        principal: admission.principal,
        prepared: {
          endpoint: how.endpoint,
          model,
          messages: input.messages,
          headers,
          cycleStart: admission.cycleStart,
          reservationId: admission.reservationId,
          firstReply,
        },
      };
    } catch (err) {
      firstReply?.done();
      throw err;
    }
  }

  /** The ticket of `FirstReplyGate` for a `/chat` request on `model` (no promise once learned). */
  private firstReply(model: ModelInfo, endpoint: string): FirstReplyTicket | Promise<FirstReplyTicket> {
    return this.deps.poolMetering.estimator.firstReplies.enter(estimatorKey(model.id, endpoint));
  }

  /** The quota reservation of a request: the prompt (corrected as learned) plus the expected reply. */
  private reserveFor(messages: LlmMessage[], model: ModelInfo, endpoint: string): number {
    const key = estimatorKey(model.id, endpoint);
    const est = this.deps.poolMetering.estimator;
    return Math.ceil(estimateTokens(messageChars(messages)) * est.inputFactor(key)) + est.expect(key);
  }

  /**
   * The same checks for a caller already authenticated another way (the web console's session,
   * decision 0025): the body's 400s, then 429, then 403 `Token limit exceeded`, in a few
   * statements instead of the key path's one.
   */
  async prepareForPrincipal(
    principal: Principal,
    body: unknown,
    bodyError?: AppError,
  ): Promise<{ principal: Principal; prepared: PreparedChat }> {
    if (bodyError) throw bodyError;
    const input = parseChatRequest(body);
    const model = this.deps.models.resolve('chat', input.model);
    const headers = await this.deps.poolMetering.rateLimit(principal.workspaceId, 'chat');
    const firstReply = await this.firstReply(model, CHAT_ENDPOINT);
    try {
      const quota = await this.deps.poolMetering.reserveQuota(
        principal.workspaceId,
        this.reserveFor(input.messages, model, CHAT_ENDPOINT),
      );
      if (quota.quota !== null && !quota.reservationId) throw appError('TOKEN_LIMIT_EXCEEDED');
      return {
        principal,
        prepared: {
          endpoint: CHAT_ENDPOINT,
          model,
          messages: input.messages,
          headers,
          cycleStart: quota.cycleStart,
          reservationId: quota.reservationId,
          firstReply,
        },
      };
    } catch (err) {
      firstReply.done();
      throw err;
    }
  }

  /**
   * Writes the usage record after the stream (never before the first byte). Without a
   * reported usage, tokens are estimated at ~4 characters per token; a request that failed
   * before the model produced anything counts no tokens.
   */
  async record(args: {
    principal: Principal;
    requestId: string;
    prepared: PreparedChat;
    status: 'success' | 'error' | 'aborted';
    usage?: { inputTokens: number; outputTokens: number };
    streamedChars: number;
    producedOutput: boolean;
    latencyMs: number;
  }): Promise<void> {
    const { prepared } = args;
    const usage =
      args.usage ??
      (args.producedOutput || args.streamedChars > 0
        ? {
            inputTokens: estimateTokens(messageChars(prepared.messages)),
            outputTokens: estimateTokens(args.streamedChars),
          }
        : { inputTokens: 0, outputTokens: 0 });
    const key = estimatorKey(prepared.model.id, prepared.endpoint);
    if (args.status === 'success') this.deps.poolMetering.estimator.observe(key, usage.outputTokens);
    if (args.usage) {
      this.deps.poolMetering.estimator.observeInput(
        key,
        estimateTokens(messageChars(prepared.messages)),
        args.usage.inputTokens,
      );
    }
    const { costMicros, lines } = this.deps.poolMetering.price(
      prepared.model,
      usage.inputTokens,
      usage.outputTokens,
    );
    await this.deps.poolMetering
      .record({
        workspaceId: args.principal.workspaceId,
        apiKeyId: args.principal.keyId ?? null,
        requestId: args.requestId,
        endpoint: prepared.endpoint,
        model: prepared.model.id,
        inputTokens: usage.inputTokens,
        outputTokens: usage.outputTokens,
        costMicros,
        providerStatus: args.status,
        latencyMs: args.latencyMs,
        componentLines: lines,
        meter: 'tokens',
        cycleStart: prepared.cycleStart,
        reservationId: prepared.reservationId,
      })
      // The waiters of a first reply size their reservations once it is written (its
      // reservation released, its tokens counted).
      .finally(() => prepared.firstReply?.done());
  }
}
