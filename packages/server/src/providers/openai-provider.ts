import OpenAI from 'openai';
import type {
  ChatCompletionChunk,
  ChatCompletionCreateParams,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import { AppError, appError } from '../errors/index.js';
import { isAbortError } from './abort.js';
import type {
  ChatRequest,
  ChatResult,
  ChatStreamPart,
  LlmMessage,
  LlmProvider,
  LlmUsage,
  ModelInfo,
  ToolCall,
  ToolCallDelta,
} from './llm.js';
import type { StaticModelCatalog } from './models.js';
import { postEventStream, UpstreamHttpError, UpstreamStreamError } from './sse-client.js';
import { estimateTokens, messageChars } from './tokens.js';

const CONNECTION_ERRORS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/** The upstream's failure as the error the API answers with (spec 7, 502 rows). */
export function upstreamError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  if (err instanceof OpenAI.APIConnectionError) return appError('AI_UNAVAILABLE');
  if (err instanceof UpstreamHttpError) {
    return appError('AI_MODEL_ERROR', {
      detail: err.message.slice(0, 300),
      details: {
        upstreamStatus: err.status,
      },
    });
  }
  if (err instanceof UpstreamStreamError) return appError('AI_UNAVAILABLE');
  if (err instanceof OpenAI.APIError && err.status !== undefined) {
    const body = err.error as { message?: unknown } | undefined;
    const detail = typeof body?.message === 'string' && body.message ? body.message : err.message;
    return appError('AI_MODEL_ERROR', {
      detail: String(detail).slice(0, 300),
      details: {
        upstreamStatus: err.status,
      },
    });
  }
  const e = err as { code?: string; name?: string; message?: string } | undefined;
  if ((e?.code && CONNECTION_ERRORS.has(e.code)) || e?.name === 'TimeoutError') {
    return appError('AI_UNAVAILABLE');
  }
  return appError('AI_MODEL_ERROR', { detail: String(e?.message ?? 'unknown error').slice(0, 300) });
}

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
  if (req.passthrough) Object.assign(params, req.passthrough);
  return params;
}

export interface StreamTextResult {
  usage: LlmUsage;
  finishReason: string;
  toolCalls: ToolCall[];
  /** Characters of text produced (the estimate's basis when no usage came). */
  textChars: number;
  /** The model the upstream says answered (`model` of its chunks). */
  responseModel?: string;
}

/** Text the provider has produced so far, readable while a stream runs (abort accounting). */
export interface StreamProgress {
  textChars: number;
  /** Set when the first part arrived from upstream. */
  started: boolean;
}

/**
 * Folds streamed chat-completion chunks into text callbacks, tool calls, the finish reason and
 * the usage (or its ~4 chars/token estimate when the upstream reports none).
 */
class ChunkAccumulator {
  private usage: LlmUsage | undefined;
  /** Text of the current read, handed to `onText` in one piece by `flush`. */
  private pending = '';
  private finishReason = 'stop';
  private readonly calls: ToolCall[] = [];
  private responseModel: string | undefined;

  constructor(
    private readonly onText: (text: string) => void,
    private readonly progress: StreamProgress,
    /** Hand text over per network read (`flush`) instead of per delta. */
    private readonly coalesce: boolean,
    private readonly onToolCallDelta?: (delta: ToolCallDelta) => void,
  ) {}

  add(chunk: ChatCompletionChunk): void {
    this.progress.started = true;
    const choice = chunk.choices?.[0];
    if (choice) {
      const delta = choice.delta;
      const text = delta?.content;
      if (text) {
        this.progress.textChars += text.length;
        if (this.coalesce) this.pending += text;
        else this.onText(text);
      }
      if (delta?.tool_calls) {
        for (const tc of delta.tool_calls) {
          let slot = this.calls[tc.index];
          if (!slot) {
            slot = { id: tc.id ?? '', name: '', arguments: '' };
            this.calls[tc.index] = slot;
          }
          if (tc.id) slot.id = tc.id;
          if (tc.function?.name) slot.name += tc.function.name;
          if (tc.function?.arguments) slot.arguments += tc.function.arguments;
          if (this.onToolCallDelta) {
            // Text that came before the fragment goes out before it.
            this.flush();
            const d: ToolCallDelta = { index: tc.index };
            if (tc.id) d.id = tc.id;
            if (tc.function?.name) d.name = tc.function.name;
            if (tc.function?.arguments) d.arguments = tc.function.arguments;
            this.onToolCallDelta(d);
          }
        }
      }
      if (choice.finish_reason) this.finishReason = choice.finish_reason;
    }
    if (this.responseModel === undefined && chunk.model) this.responseModel = chunk.model;
    if (chunk.usage) {
      this.usage = {
        inputTokens: chunk.usage.prompt_tokens ?? 0,
        outputTokens: chunk.usage.completion_tokens ?? 0,
        estimated: false,
      };
    }
  }

  /** Hands the text gathered since the last flush to `onText` (nothing when there is none). */
  flush(): void {
    if (this.pending === '') return;
    const text = this.pending;
    this.pending = '';
    this.onText(text);
  }

  result(messages: LlmMessage[]): StreamTextResult {
    this.flush();
    const toolCalls = this.calls.filter(Boolean);
    let usage = this.usage;
    if (!usage) {
      let outChars = this.progress.textChars;
      for (const t of toolCalls) outChars += t.name.length + t.arguments.length;
      usage = {
        inputTokens: estimateTokens(messageChars(messages)),
        outputTokens: estimateTokens(outChars),
        estimated: true,
      };
    }
    return {
      usage,
      finishReason: this.finishReason,
      toolCalls,
      textChars: this.progress.textChars,
      responseModel: this.responseModel,
    };
  }
}

interface ProviderConnection {
  client: OpenAI;
  completionsUrl: URL;
  streamHeaders: Record<string, string>;
}

export interface LlmSettings {
  maxRetries: number;
  timeoutMs: number;
  /**
   * Retries of an embeddings request (`EMBEDDING_MAX_RETRIES`; default `maxRetries`): on
   * connection errors, timeouts, 408, 429 and 5xx, with exponential backoff or the upstream's
   * `Retry-After` (see `embeddingRetryDelay`).
   */
  embeddingMaxRetries?: number;
  /** `fetch` for the SDK (default: Node's http client, see http-fetch.ts). */
  fetch?: typeof fetch;
  /**
   * How streams are read: `node` (default) posts on Node's HTTP client and parses the event
   * stream itself (`sse-client.ts`); `sdk` streams through the `openai` SDK.
   */
  streaming?: 'node' | 'sdk';
}

/**
 * `LlmProvider` over the `openai` SDK, one client per configured provider. Streams ask for
 * usage (`stream_options.include_usage`) and fall back to ~4 characters per token.
 */
export class OpenAiLlmProvider implements LlmProvider {
  private readonly connections = new Map<string, ProviderConnection>();

  constructor(
    protected readonly catalog: StaticModelCatalog,
    private readonly settings: LlmSettings,
  ) {}

  /**
   * One provider's SDK client and, derived from it (same base URL and key), where the
   * streaming client posts and with which headers. Built once per provider.
   */
  private connection(providerId: string): ProviderConnection {
    let c = this.connections.get(providerId);
    if (!c) {
      const p = this.catalog.provider(providerId);
      if (!p) throw appError('PROVIDER_NOT_CONFIGURED');
      const client = new OpenAI({
        baseURL: p.baseUrl,
        apiKey: p.apiKey || 'unset',
        maxRetries: this.settings.maxRetries,
        timeout: this.settings.timeoutMs,
        ...(this.settings.fetch ? { fetch: this.settings.fetch } : {}),
      });
      c = {
        client,
        completionsUrl: new URL(`${client.baseURL.replace(/\/+$/, '')}/chat/completions`),
        streamHeaders: {
          'content-type': 'application/json',
          accept: 'text/event-stream',
          authorization: `Bearer ${client.apiKey}`,
        },
      };
      this.connections.set(providerId, c);
    }
    return c;
  }

  client(providerId: string): OpenAI {
    return this.connection(providerId).client;
  }

  /**
   * The fast path for streaming (`/chat`, agents, apps): `onText` is called synchronously per
   * text delta, or with `coalesce` once per network read with the deltas that arrived together
   * (`/chat`: one downstream write per read, not per delta), with no per-chunk wrapper objects
   * or extra promises. Rejects with an
   * `AppError` (502) on upstream failure, or with the abort error when `signal` fired.
   * `progress` is updated as text arrives so a caller can account for an aborted generation.
   *
   * By default the request goes out on Node's HTTP client and the event stream is parsed by
   * `eventsource-parser` (`sse-client.ts`); the `openai` SDK's request and stream machinery
   * costs about twice the CPU per streamed reply (decision 0014). `LLM_HTTP_CLIENT=fetch`
   * streams through the SDK instead. Both feed the same `ChunkAccumulator`.
   */
  async streamText(
    req: ChatRequest,
    onText: (text: string) => void,
    progress: StreamProgress = { textChars: 0, started: false },
    options: { coalesce?: boolean; onToolCallDelta?: (delta: ToolCallDelta) => void } = {},
  ): Promise<StreamTextResult> {
    const acc = new ChunkAccumulator(onText, progress, options.coalesce ?? false, options.onToolCallDelta);
    const body = { ...buildParams(req), stream: true as const, stream_options: { include_usage: true } };
    try {
      if (this.settings.streaming === 'sdk') {
        const stream = await this.client(req.model.provider).chat.completions.create(body, {
          signal: req.signal,
        });
        for await (const chunk of stream) {
          acc.add(chunk);
          acc.flush();
        }
        // The SDK ends the iteration quietly on abort: a cut-short reply must not look complete.
        if (req.signal?.aborted) throw new OpenAI.APIUserAbortError();
      } else {
        const c = this.connection(req.model.provider);
        await postEventStream(
          {
            url: c.completionsUrl,
            headers: c.streamHeaders,
            body: JSON.stringify(body),
            signal: req.signal,
            timeoutMs: this.settings.timeoutMs,
            maxRetries: this.settings.maxRetries,
          },
          (data) => acc.add(JSON.parse(data) as ChatCompletionChunk),
          () => acc.flush(),
        );
      }
    } catch (err) {
      if (isAbortError(err) || req.signal?.aborted) throw err;
      throw upstreamError(err);
    }
    return acc.result(req.messages);
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
    return {
      text,
      toolCalls,
      usage,
      finishReason: choice?.finish_reason ?? 'stop',
      responseModel: res.model,
    };
  }

  /**
   * Embeds `input` in one request. A retryable failure (connection error, timeout, 408, 429,
   * 5xx) is retried up to `embeddingMaxRetries` times, waiting what the upstream's
   * `Retry-After` asks (`embeddingRetryDelay`) or an exponential backoff; a permanent one (any
   * other 4xx) fails at once. Only the answered attempt reports usage, so a retried call is
   * metered once.
   */
  async embed(
    model: ModelInfo,
    input: string[],
    signal?: AbortSignal,
  ): Promise<{ vectors: number[][]; usage: LlmUsage; responseModel?: string }> {
    const client = this.client(model.provider);
    const maxRetries = this.settings.embeddingMaxRetries ?? this.settings.maxRetries;
    let res: OpenAI.Embeddings.CreateEmbeddingResponse;
    for (let attempt = 0; ; attempt++) {
      try {
        res = await client.embeddings.create(
          { model: model.upstream, input, encoding_format: 'float' },
          { signal, maxRetries: 0 },
        );
        break;
      } catch (err) {
        if (isAbortError(err) || signal?.aborted) throw err;
        const wait = attempt < maxRetries ? embeddingRetryDelay(err, attempt) : undefined;
        if (wait === undefined) throw upstreamError(err);
        await abortableSleep(wait, signal);
      }
    }
    const vectors = [...res.data].sort((a, b) => a.index - b.index).map((d) => d.embedding);
    const usage: LlmUsage = res.usage
      ? { inputTokens: res.usage.prompt_tokens, outputTokens: 0, estimated: false }
      : {
          inputTokens: estimateTokens(input.reduce((s, t) => s + t.length, 0)),
          outputTokens: 0,
          estimated: true,
        };
    return { vectors, usage, responseModel: res.model };
  }
}

/** First wait of the embeddings backoff, doubled per retry up to `EMBED_BACKOFF_MAX_MS`. */
export const EMBED_BACKOFF_MS = 500;
export const EMBED_BACKOFF_MAX_MS = 8_000;
/** A `Retry-After` longer than this is not waited for: the call fails (an ingest would stall). */
export const RETRY_AFTER_MAX_MS = 60_000;

/**
 * How long to wait before retrying a failed embeddings request, or undefined when it must not
 * be retried: connection errors and timeouts, 408, 429 and 5xx are retried (after the
 * upstream's `Retry-After`, in seconds or as an HTTP date, when it sent one and it is at most
 * `RETRY_AFTER_MAX_MS`; else `EMBED_BACKOFF_MS · 2^attempt` up to `EMBED_BACKOFF_MAX_MS`, minus
 * up to 25 % jitter); any other 4xx is permanent.
 */
export function embeddingRetryDelay(err: unknown, attempt: number): number | undefined {
  const backoff = () =>
    Math.min(EMBED_BACKOFF_MS * 2 ** attempt, EMBED_BACKOFF_MAX_MS) * (1 - Math.random() * 0.25);
  if (err instanceof OpenAI.APIConnectionError) return backoff();
  if (err instanceof OpenAI.APIError && err.status !== undefined) {
    const status = err.status;
    if (!(status === 408 || status === 429 || status >= 500)) return undefined;
    const header = err.headers?.get('retry-after');
    if (header) {
      const seconds = Number(header);
      const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(header) - Date.now();
      if (Number.isFinite(ms)) {
        if (ms > RETRY_AFTER_MAX_MS) return undefined;
        return Math.max(0, ms);
      }
    }
    return backoff();
  }
  const e = err as { code?: string; name?: string } | undefined;
  if ((e?.code && CONNECTION_ERRORS.has(e.code)) || e?.name === 'TimeoutError') return backoff();
  return undefined;
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason ?? new DOMException('This operation was aborted', 'AbortError'));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason ?? new DOMException('This operation was aborted', 'AbortError'));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
