import OpenAI from 'openai';
import type {
  ChatCompletionChunk,
  ChatCompletionCreateParams,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import { AppError } from '../http/errors.js';
import type {
  ChatRequest,
  ChatResult,
  ChatStreamPart,
  LlmMessage,
  LlmProvider,
  LlmUsage,
  ModelInfo,
  ToolCall,
} from './llm.js';
import type { StaticModelCatalog } from './models.js';

export const AI_UNAVAILABLE = 'AI service is temporarily unavailable';

/** About four characters per token (spec 8), used when the upstream reports no usage. */
export const estimateTokens = (chars: number): number => (chars <= 0 ? 0 : Math.ceil(chars / 4));

export function messageChars(messages: LlmMessage[]): number {
  let n = 0;
  for (const m of messages) {
    if (typeof m.content === 'string') n += m.content.length;
    if (m.role === 'assistant' && m.toolCalls) {
      for (const t of m.toolCalls) n += t.name.length + t.arguments.length;
    }
  }
  return n;
}

/** The upstream's failure as the error the API answers with (spec 7, 502 rows). */
export function upstreamError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  if (err instanceof OpenAI.APIConnectionError) return new AppError(502, AI_UNAVAILABLE, 'AI_UNAVAILABLE');
  if (err instanceof OpenAI.APIError && err.status !== undefined) {
    const body = err.error as { message?: unknown } | undefined;
    const detail = typeof body?.message === 'string' && body.message ? body.message : err.message;
    return new AppError(502, `AI model error: ${String(detail).slice(0, 300)}`, 'AI_MODEL_ERROR', {
      upstreamStatus: err.status,
    });
  }
  const e = err as { code?: string; name?: string; message?: string } | undefined;
  if (e?.code === 'ECONNREFUSED' || e?.code === 'ECONNRESET' || e?.name === 'TimeoutError') {
    return new AppError(502, AI_UNAVAILABLE, 'AI_UNAVAILABLE');
  }
  return new AppError(
    502,
    `AI model error: ${String(e?.message ?? 'unknown error').slice(0, 300)}`,
    'AI_MODEL_ERROR',
  );
}

export const isAbortError = (err: unknown): boolean =>
  err instanceof OpenAI.APIUserAbortError || (err as { name?: string } | undefined)?.name === 'AbortError';

function toOpenAiMessages(messages: LlmMessage[]): ChatCompletionMessageParam[] {
  return messages.map((m): ChatCompletionMessageParam => {
    if (m.role === 'tool') return { role: 'tool', tool_call_id: m.toolCallId, content: m.content };
    if (m.role === 'assistant') {
      return {
        role: 'assistant',
        content: m.content,
        ...(m.toolCalls?.length
          ? {
              tool_calls: m.toolCalls.map((t) => ({
                id: t.id,
                type: 'function' as const,
                function: { name: t.name, arguments: t.arguments },
              })),
            }
          : {}),
      };
    }
    return { role: m.role, content: m.content };
  });
}

function buildParams(req: ChatRequest): Omit<ChatCompletionCreateParams, 'stream'> {
  const params: Omit<ChatCompletionCreateParams, 'stream'> = {
    model: req.model.upstream,
    messages: toOpenAiMessages(req.messages),
  };
  if (req.tools?.length) {
    params.tools = req.tools.map((t) => ({
      type: 'function',
      function: { name: t.name, description: t.description, parameters: t.parameters },
    }));
  }
  if (req.temperature !== undefined) params.temperature = req.temperature;
  if (req.maxTokens !== undefined) params.max_tokens = req.maxTokens;
  if (req.responseSchema) {
    params.response_format = {
      type: 'json_schema',
      json_schema: { name: req.responseSchema.name, schema: req.responseSchema.schema, strict: true },
    };
  }
  return params;
}

export interface StreamTextResult {
  usage: LlmUsage;
  finishReason: string;
  toolCalls: ToolCall[];
  /** Characters of text produced (the estimate's basis when no usage came). */
  textChars: number;
}

/** Text the provider has produced so far, readable while a stream runs (abort accounting). */
export interface StreamProgress {
  textChars: number;
  /** Set when the first part arrived from upstream. */
  started: boolean;
}

export interface LlmSettings {
  maxRetries: number;
  timeoutMs: number;
  /** `fetch` for the SDK (default: Node's http client, see http-fetch.ts). */
  fetch?: typeof fetch;
}

/**
 * `LlmProvider` over the `openai` SDK, one client per configured provider. Streams ask for
 * usage (`stream_options.include_usage`) and fall back to ~4 characters per token.
 */
export class OpenAiLlmProvider implements LlmProvider {
  private readonly clients = new Map<string, OpenAI>();

  constructor(
    private readonly catalog: StaticModelCatalog,
    private readonly settings: LlmSettings,
  ) {}

  client(providerId: string): OpenAI {
    let c = this.clients.get(providerId);
    if (!c) {
      const p = this.catalog.provider(providerId);
      if (!p) throw new AppError(503, 'Model configuration error');
      c = new OpenAI({
        baseURL: p.baseUrl,
        apiKey: p.apiKey || 'unset',
        maxRetries: this.settings.maxRetries,
        timeout: this.settings.timeoutMs,
        ...(this.settings.fetch ? { fetch: this.settings.fetch } : {}),
      });
      this.clients.set(providerId, c);
    }
    return c;
  }

  /**
   * The fast path for plain text streaming (`/chat`): `onText` is called synchronously for each
   * text delta, with no per-chunk wrapper objects or extra promises. Rejects with an `AppError`
   * (502) on upstream failure, or with the abort error when `signal` fired. `progress` is
   * updated as text arrives so a caller can account for an aborted generation.
   */
  async streamText(
    req: ChatRequest,
    onText: (text: string) => void,
    progress: StreamProgress = { textChars: 0, started: false },
  ): Promise<StreamTextResult> {
    const client = this.client(req.model.provider);
    let stream: AsyncIterable<ChatCompletionChunk>;
    try {
      stream = await client.chat.completions.create(
        { ...buildParams(req), stream: true, stream_options: { include_usage: true } },
        { signal: req.signal },
      );
    } catch (err) {
      if (isAbortError(err) || req.signal?.aborted) throw err;
      throw upstreamError(err);
    }
    let usage: LlmUsage | undefined;
    let finishReason = 'stop';
    const calls: { id: string; name: string; arguments: string }[] = [];
    try {
      for await (const chunk of stream) {
        progress.started = true;
        const choice = chunk.choices[0];
        if (choice) {
          const delta = choice.delta;
          const text = delta?.content;
          if (text) {
            progress.textChars += text.length;
            onText(text);
          }
          if (delta?.tool_calls) {
            for (const tc of delta.tool_calls) {
              let slot = calls[tc.index];
              if (!slot) {
                slot = { id: tc.id ?? '', name: '', arguments: '' };
                calls[tc.index] = slot;
              }
              if (tc.id) slot.id = tc.id;
              if (tc.function?.name) slot.name += tc.function.name;
              if (tc.function?.arguments) slot.arguments += tc.function.arguments;
            }
          }
          if (choice.finish_reason) finishReason = choice.finish_reason;
        }
        if (chunk.usage) {
          usage = {
            inputTokens: chunk.usage.prompt_tokens ?? 0,
            outputTokens: chunk.usage.completion_tokens ?? 0,
            estimated: false,
          };
        }
      }
    } catch (err) {
      if (isAbortError(err) || req.signal?.aborted) throw err;
      throw upstreamError(err);
    }
    // The SDK ends the iteration quietly on abort: a cut-short reply must not look complete.
    if (req.signal?.aborted) throw new OpenAI.APIUserAbortError();
    const toolCalls = calls.filter(Boolean);
    if (!usage) {
      let outChars = progress.textChars;
      for (const t of toolCalls) outChars += t.name.length + t.arguments.length;
      usage = {
        inputTokens: estimateTokens(messageChars(req.messages)),
        outputTokens: estimateTokens(outChars),
        estimated: true,
      };
    }
    return { usage, finishReason, toolCalls, textChars: progress.textChars };
  }

  async *stream(req: ChatRequest): AsyncIterable<ChatStreamPart> {
    // Bridge the callback fast path to an async iterable: parts are buffered and drained.
    const queue: ChatStreamPart[] = [];
    let wake: (() => void) | undefined;
    let done = false;
    let failure: unknown;
    let result: StreamTextResult | undefined;
    const push = (p: ChatStreamPart) => {
      queue.push(p);
      wake?.();
    };
    // Our own controller so a consumer that stops iterating early also stops the upstream.
    const ctrl = new AbortController();
    const onAbort = () => ctrl.abort();
    req.signal?.addEventListener('abort', onAbort, { once: true });
    if (req.signal?.aborted) ctrl.abort();
    const run = this.streamText({ ...req, signal: ctrl.signal }, (text) => push({ type: 'text', text })).then(
      (r) => {
        result = r;
        done = true;
        wake?.();
      },
      (err) => {
        failure = err;
        done = true;
        wake?.();
      },
    );
    try {
      while (true) {
        while (queue.length > 0) yield queue.shift() as ChatStreamPart;
        if (done) break;
        await new Promise<void>((r) => {
          wake = r;
        });
        wake = undefined;
      }
      await run;
      if (failure) throw failure;
      const r = result as StreamTextResult;
      for (const call of r.toolCalls) yield { type: 'tool_call', call };
      yield { type: 'usage', usage: r.usage };
      yield { type: 'finish', reason: r.finishReason };
    } finally {
      req.signal?.removeEventListener('abort', onAbort);
      if (!done) ctrl.abort();
      await run;
    }
  }

  async complete(req: ChatRequest): Promise<ChatResult> {
    const client = this.client(req.model.provider);
    let res: OpenAI.Chat.Completions.ChatCompletion;
    try {
      res = await client.chat.completions.create(
        { ...buildParams(req), stream: false },
        { signal: req.signal },
      );
    } catch (err) {
      if (isAbortError(err) || req.signal?.aborted) throw err;
      throw upstreamError(err);
    }
    const choice = res.choices[0];
    const text = choice?.message?.content ?? '';
    const toolCalls: ToolCall[] = (choice?.message?.tool_calls ?? []).flatMap((t) =>
      t.type === 'function' ? [{ id: t.id, name: t.function.name, arguments: t.function.arguments }] : [],
    );
    const usage: LlmUsage = res.usage
      ? { inputTokens: res.usage.prompt_tokens, outputTokens: res.usage.completion_tokens, estimated: false }
      : {
          inputTokens: estimateTokens(messageChars(req.messages)),
          outputTokens: estimateTokens(
            text.length + toolCalls.reduce((s, t) => s + t.name.length + t.arguments.length, 0),
          ),
          estimated: true,
        };
    return { text, toolCalls, usage, finishReason: choice?.finish_reason ?? 'stop' };
  }

  async embed(
    model: ModelInfo,
    input: string[],
    signal?: AbortSignal,
  ): Promise<{ vectors: number[][]; usage: LlmUsage }> {
    const client = this.client(model.provider);
    try {
      const res = await client.embeddings.create(
        { model: model.upstream, input, encoding_format: 'float' },
        { signal },
      );
      const vectors = [...res.data].sort((a, b) => a.index - b.index).map((d) => d.embedding);
      const usage: LlmUsage = res.usage
        ? { inputTokens: res.usage.prompt_tokens, outputTokens: 0, estimated: false }
        : {
            inputTokens: estimateTokens(input.reduce((s, t) => s + t.length, 0)),
            outputTokens: 0,
            estimated: true,
          };
      return { vectors, usage };
    } catch (err) {
      if (isAbortError(err) || signal?.aborted) throw err;
      throw upstreamError(err);
    }
  }
}
