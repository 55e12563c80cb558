/**
 * The contract between the server and language models. Everything above this line (chat,
 * agents, apps, artifacts) speaks these types; the implementation behind it uses the `openai`
 * SDK against any OpenAI-compatible endpoint.
 */

export type ModelKind = 'chat' | 'embedding' | 'image';

export interface ModelInfo {
  /** Public id callers pass as `model`. */
  id: string;
  /** Name sent upstream. */
  upstream: string;
  /** Provider id from the models file (`default` for the env-configured one). */
  provider: string;
  kind: ModelKind;
  contextWindow: number;
  /** USD per million tokens. */
  inputPricePerMTok: number;
  outputPricePerMTok: number;
  /** USD per generated image (image models). */
  pricePerImage?: number;
  active: boolean;
}

export interface ToolCall {
  id: string;
  name: string;
  /** JSON text exactly as the model produced it. */
  arguments: string;
}

export type LlmMessage =
  | { role: 'system' | 'user'; content: string }
  | { role: 'assistant'; content: string | null; toolCalls?: ToolCall[] }
  | { role: 'tool'; toolCallId: string; content: string };

export interface ToolDefinition {
  name: string;
  description?: string;
  /** JSON Schema of the arguments object. */
  parameters: Record<string, unknown>;
}

export interface LlmUsage {
  inputTokens: number;
  outputTokens: number;
  /** True when the upstream reported no usage and the ~4 chars/token estimate was used. */
  estimated: boolean;
}

export interface ChatRequest {
  model: ModelInfo;
  messages: LlmMessage[];
  tools?: ToolDefinition[];
  temperature?: number;
  maxTokens?: number;
  /** Structured output: a JSON Schema the reply must follow. */
  responseSchema?: { name: string; schema: Record<string, unknown> };
  /**
   * Sampling and output options of the OpenAI-compatible surface (`/openai/chat/completions`),
   * sent upstream under their OpenAI names as given (validated by that surface).
   */
  passthrough?: ChatPassthrough;
  signal?: AbortSignal;
}

/** OpenAI chat-completions options forwarded as they are (snake_case, OpenAI's shapes). */
export interface ChatPassthrough {
  top_p?: number;
  stop?: string | string[];
  seed?: number;
  user?: string;
  frequency_penalty?: number;
  presence_penalty?: number;
  tool_choice?: 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };
  parallel_tool_calls?: boolean;
  response_format?:
    | { type: 'text' }
    | { type: 'json_object' }
    | {
        type: 'json_schema';
        json_schema: {
          name: string;
          description?: string;
          schema?: Record<string, unknown>;
          strict?: boolean | null;
        };
      };
  max_completion_tokens?: number;
  tools?: {
    type: 'function';
    function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean };
  }[];
}

/** A fragment of a streamed tool call, as the upstream sent it (`delta.tool_calls[]`). */
export interface ToolCallDelta {
  index: number;
  id?: string;
  name?: string;
  arguments?: string;
}

/** One part of a streamed reply, in order; `usage` and then `finish` come last. */
export type ChatStreamPart =
  | { type: 'text'; text: string }
  | { type: 'tool_call'; call: ToolCall }
  | { type: 'usage'; usage: LlmUsage }
  | { type: 'finish'; reason: 'stop' | 'length' | 'tool_calls' | 'content_filter' | string };

export interface ChatResult {
  text: string;
  toolCalls: ToolCall[];
  usage: LlmUsage;
  finishReason: string;
  /** The model the upstream says answered. */
  responseModel?: string;
}

export interface LlmProvider {
  /**
   * Streams a completion. Errors before the first part are thrown as `AppError`
   * (502 `AI model error: …` / `AI service is temporarily unavailable`); aborting `signal`
   * stops the upstream request.
   */
  stream(req: ChatRequest): AsyncIterable<ChatStreamPart>;
  complete(req: ChatRequest): Promise<ChatResult>;
  /**
   * Fast path for plain text streaming: `onText` is called synchronously per text delta, or
   * with `coalesce` once per network read from upstream with the deltas that arrived together
   * (no per-chunk objects or promises). `progress.textChars` / `progress.started` are updated as
   * the stream runs, so a caller can account for an aborted generation. Errors as `stream`.
   */
  streamText(
    req: ChatRequest,
    onText: (text: string) => void,
    progress?: { textChars: number; started: boolean },
    options?: {
      coalesce?: boolean;
      /** Called per tool-call fragment as it arrives (text gathered before it is handed over first). */
      onToolCallDelta?: (delta: ToolCallDelta) => void;
    },
  ): Promise<{ usage: LlmUsage; finishReason: string; toolCalls: ToolCall[]; textChars: number }>;
  embed(
    model: ModelInfo,
    input: string[],
    signal?: AbortSignal,
  ): Promise<{ vectors: number[][]; usage: LlmUsage }>;
}

export interface ModelCatalog {
  /**
   * The model to use: `id` when given (400 `Invalid model` style error when unknown), else the
   * default of that kind; 503 `No AI model configured` when there is none.
   */
  resolve(kind: ModelKind, id?: string | null): ModelInfo;
  list(kind?: ModelKind): ModelInfo[];
  /** The default model id of a kind, if any. */
  defaultId(kind: ModelKind): string | undefined;
  /** Where a provider (by id) lives: its type, endpoint and key. */
  provider(id: string): { id: string; type: string; baseUrl?: string; apiKey?: string } | undefined;
}
