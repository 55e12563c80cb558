import { hashApiKey } from '../../auth/api-keys.js';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { AppError, INVALID_REQUEST_BODY, toAppError } from '../../http/errors.js';
import type { LlmMessage, ModelInfo } from '../../providers/llm.js';
import { estimateTokens, messageChars } from '../../providers/openai-provider.js';
import { type ChatRequestInput, parseChatRequest } from './schema.js';

export const CHAT_ENDPOINT = '/chat';

export interface PreparedChat {
  model: ModelInfo;
  messages: LlmMessage[];
  /** RateLimit-* headers for the successful response. */
  headers: Record<string, string>;
  /** Billing cycle of the token quota, read in the same round trip as the rate limit. */
  cycleStart: Date;
}

/**
 * `/chat` (spec 4.1): token-metered against the workspace's monthly quota, rate limited per
 * workspace. The route streams; this holds the checks and the accounting, no req/res. Its
 * statements run on the plain pool (`db/sql.ts`), off the ORM: this is the hot path.
 */
export class ChatService {
  constructor(private readonly deps: ServerDeps) {}

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
  ): Promise<{ principal: Principal; prepared: PreparedChat }> {
    let invalid: AppError | undefined;
    let input: ChatRequestInput | undefined;
    let model: ModelInfo | undefined;
    try {
      if (bodyError) throw bodyError;
      input = parseChatRequest(body);
      model = this.deps.models.resolve('chat', input.model);
    } catch (err) {
      invalid = toAppError(err);
    }
    const admission = await this.deps.poolMetering.admitKeyRequest(hashApiKey(apiKey), 'chat', !invalid);
    if (!admission) throw new AppError(401, 'Invalid API key');
    onPrincipal?.(admission.principal);
    if (invalid || !input || !model) throw invalid ?? new AppError(400, INVALID_REQUEST_BODY);
    const headers = admission.limit();
    admission.quota();
    return {
      principal: admission.principal,
      prepared: { model, messages: input.messages, headers, cycleStart: admission.cycleStart },
    };
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
    const { costMicros, lines } = this.deps.poolMetering.price(
      prepared.model,
      usage.inputTokens,
      usage.outputTokens,
    );
    await this.deps.poolMetering.record({
      workspaceId: args.principal.workspaceId,
      apiKeyId: args.principal.keyId ?? null,
      requestId: args.requestId,
      endpoint: CHAT_ENDPOINT,
      model: prepared.model.id,
      inputTokens: usage.inputTokens,
      outputTokens: usage.outputTokens,
      costMicros,
      providerStatus: args.status,
      latencyMs: args.latencyMs,
      componentLines: lines,
      meter: 'tokens',
      cycleStart: prepared.cycleStart,
    });
  }
}
