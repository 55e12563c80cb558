import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import type { LlmMessage, ModelInfo } from '../../providers/llm.js';
import { estimateTokens, messageChars } from '../../providers/openai-provider.js';
import type { ChatRequestInput } from './schema.js';

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
 * workspace. The route streams; this holds the checks and the accounting, no req/res.
 */
export class ChatService {
  constructor(private readonly deps: ServerDeps) {}

  /** Model (400 `Invalid model` / 503), rate limit (429) and token quota (403), before any upstream call. */
  async prepare(principal: Principal, input: ChatRequestInput): Promise<PreparedChat> {
    const model = this.deps.models.resolve('chat', input.model);
    const { headers, cycleStart } = await this.deps.metering.admitTokenMetered(principal.workspaceId, 'chat');
    return { model, messages: input.messages, headers, cycleStart };
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
    const { costMicros, lines } = this.deps.metering.price(
      prepared.model,
      usage.inputTokens,
      usage.outputTokens,
    );
    await this.deps.metering.record({
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
