import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { ToolCall, ToolCallDelta } from '../../providers/llm.js';
import { type OpenAiError, openAiErrorBody } from './errors.js';

export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export const usageOf = (inputTokens: number, outputTokens: number): CompletionUsage => ({
  prompt_tokens: inputTokens,
  completion_tokens: outputTokens,
  total_tokens: inputTokens + outputTokens,
});

const toolCallJson = (t: ToolCall) => ({
  id: t.id,
  type: 'function' as const,
  function: { name: t.name, arguments: t.arguments },
});

/** A non-streamed `chat.completion` object. */
export function completionObject(args: {
  model: string;
  text: string;
  toolCalls: ToolCall[];
  finishReason: string;
  usage: CompletionUsage;
}) {
  return {
    id: newCompletionId(),
    object: 'chat.completion' as const,
    created: Math.floor(Date.now() / 1000),
    model: args.model,
    system_fingerprint: null,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant' as const,
          content: args.toolCalls.length > 0 && args.text === '' ? null : args.text,
          refusal: null,
          ...(args.toolCalls.length > 0 ? { tool_calls: args.toolCalls.map(toolCallJson) } : {}),
        },
        logprobs: null,
        finish_reason: args.finishReason,
      },
    ],
    usage: args.usage,
  };
}

export const newCompletionId = () => `chatcmpl-${randomBytes(12).toString('hex')}`;

export const STREAM_HEADERS: Record<string, string> = {
  'Content-Type': 'text/event-stream; charset=utf-8',
  'Cache-Control': 'no-cache',
  Connection: 'keep-alive',
  'X-Accel-Buffering': 'no',
};

/**
 * Writes a streamed completion as `chat.completion.chunk` events: the role first, then text and
 * tool-call deltas, the chunk carrying `finish_reason`, the usage chunk when asked
 * (`stream_options.include_usage`: every chunk then carries `usage: null`), and `data: [DONE]`.
 * The chunk's constant prefix is serialised once per stream: a text delta costs one
 * `JSON.stringify` of its text and one `res.write`. Headers go out with the first chunk, so an
 * error before it is an ordinary error response.
 */
export class ChunkWriter {
  private readonly head: string;
  private readonly tail: string;
  private started = false;
  private readonly headers: Record<string, string>;
  /** Tool-call indexes that have been announced (their first delta carries id and type). */
  private readonly announced = new Set<number>();

  constructor(
    private readonly res: ServerResponse,
    private readonly model: string,
    private readonly includeUsage: boolean,
    headers: Record<string, string>,
    readonly id = newCompletionId(),
    private readonly created = Math.floor(Date.now() / 1000),
  ) {
    this.head = `data: {"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"system_fingerprint":null,"choices":[{"index":0,"delta":`;
    this.tail = includeUsage ? '}],"usage":null}\n\n' : '}]}\n\n';
    this.headers = { ...STREAM_HEADERS, ...headers };
  }

  get headersSent(): boolean {
    return this.started;
  }

  private start(): void {
    if (this.started) return;
    this.started = true;
    this.res.writeHead(200, this.headers);
    this.res.write(
      `${this.head}{"role":"assistant","content":""},"logprobs":null,"finish_reason":null${this.tail}`,
    );
  }

  text(text: string): void {
    this.start();
    this.res.write(
      `${this.head}{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null${this.tail}`,
    );
  }

  /** One fragment of a tool call, as the model streamed it. */
  toolDelta(d: ToolCallDelta): void {
    this.start();
    const first = !this.announced.has(d.index);
    if (first) this.announced.add(d.index);
    const fn: Record<string, string> = {};
    if (d.name !== undefined) fn.name = d.name;
    fn.arguments = d.arguments ?? '';
    const call = {
      index: d.index,
      ...(d.id !== undefined ? { id: d.id } : {}),
      ...(first || d.id !== undefined ? { type: 'function' } : {}),
      function: fn,
    };
    this.res.write(
      `${this.head}{"tool_calls":[${JSON.stringify(call)}]},"logprobs":null,"finish_reason":null${this.tail}`,
    );
  }

  /** A whole tool call in one delta (agents: the call is known whole when it surfaces). */
  toolCall(index: number, t: ToolCall): void {
    this.toolDelta({ index, id: t.id, name: t.name, arguments: t.arguments });
  }

  /** The finishing chunk, the usage chunk when asked, and `[DONE]`; ends the response. */
  finish(finishReason: string, usage: CompletionUsage): void {
    this.start();
    let out = `${this.head}{},"logprobs":null,"finish_reason":${JSON.stringify(finishReason)}${this.tail}`;
    if (this.includeUsage) {
      out += `data: {"id":"${this.id}","object":"chat.completion.chunk","created":${this.created},"model":${JSON.stringify(this.model)},"system_fingerprint":null,"choices":[],"usage":${JSON.stringify(usage)}}\n\n`;
    }
    out += 'data: [DONE]\n\n';
    this.res.end(out);
  }

  /**
   * A failure after the stream opened: an `error` event (the official clients raise it as an
   * API error), then the end, without `[DONE]`, so no client takes the reply for complete.
   */
  fail(err: OpenAiError): void {
    if (!this.started) return;
    this.res.end(`data: ${JSON.stringify(openAiErrorBody(err))}\n\n`);
  }
}
