import { startGenAiCall } from '../telemetry/genai.js';
import type { ChatRequest, ChatResult, LlmUsage, ModelInfo } from './llm.js';
import { OpenAiLlmProvider, type StreamProgress, type StreamTextResult } from './openai-provider.js';

const providerName = (type: string | undefined) => (type === 'openai-compatible' || !type ? 'openai' : type);

/**
 * The OpenAI-compatible provider with each model call observed (telemetry/genai.ts): used in
 * place of `OpenAiLlmProvider` only when metrics or tracing are on, so the plain provider's
 * hot path carries no telemetry code at all. `stream` goes through `streamText`.
 */
export class InstrumentedLlmProvider extends OpenAiLlmProvider {
  private provider(model: ModelInfo): string {
    return providerName(this.catalog.provider(model.provider)?.type);
  }

  private start(req: ChatRequest, streaming: boolean) {
    return startGenAiCall({
      operation: 'chat',
      model: req.model.upstream,
      provider: this.provider(req.model),
      streaming,
      temperature: req.temperature,
      maxTokens: req.maxTokens,
      input: req.messages,
    });
  }

  override async streamText(
    req: ChatRequest,
    onText: (text: string) => void,
    progress?: StreamProgress,
    options?: { coalesce?: boolean },
  ): Promise<StreamTextResult> {
    const call = this.start(req, true);
    let out = '';
    const observed = call.capturesContent
      ? (text: string) => {
          call.firstToken();
          out += text;
          onText(text);
        }
      : (text: string) => {
          call.firstToken();
          onText(text);
        };
    try {
      const r = await call.run(() => super.streamText(req, observed, progress, options));
      call.end({
        inputTokens: r.usage.inputTokens,
        outputTokens: r.usage.outputTokens,
        reported: !r.usage.estimated,
        responseModel: r.responseModel,
        finishReasons: [r.finishReason],
        output: call.capturesContent
          ? [{ role: 'assistant', content: out, tool_calls: r.toolCalls }]
          : undefined,
      });
      return r;
    } catch (err) {
      call.fail(err);
      throw err;
    }
  }

  override async complete(req: ChatRequest): Promise<ChatResult> {
    const call = this.start(req, false);
    try {
      const r = await call.run(() => super.complete(req));
      call.end({
        inputTokens: r.usage.inputTokens,
        outputTokens: r.usage.outputTokens,
        reported: !r.usage.estimated,
        responseModel: r.responseModel,
        finishReasons: [r.finishReason],
        output: [{ role: 'assistant', content: r.text, tool_calls: r.toolCalls }],
      });
      return r;
    } catch (err) {
      call.fail(err);
      throw err;
    }
  }

  override async embed(
    model: ModelInfo,
    input: string[],
    signal?: AbortSignal,
  ): Promise<{ vectors: number[][]; usage: LlmUsage; responseModel?: string }> {
    const call = startGenAiCall({
      operation: 'embeddings',
      model: model.upstream,
      provider: this.provider(model),
    });
    try {
      const r = await call.run(() => super.embed(model, input, signal));
      call.end({
        inputTokens: r.usage.inputTokens,
        reported: !r.usage.estimated,
        responseModel: r.responseModel,
      });
      return r;
    } catch (err) {
      call.fail(err);
      throw err;
    }
  }
}
