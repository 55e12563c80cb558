import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { ToolCall, ToolCallDelta } from '../../providers/llm.js';
import { TextWindow } from '../../runs/text-coalescer.js';
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
 * `JSON.stringify` of its text. Headers go out with the first chunk, so an error before it is an
 * ordinary error response. Writes are what a stream costs (decision 0051): the role chunk goes
 * out with the first delta, text within `windowMs` of a write gathers into one delta
 * (`TextWindow`; the first text is never held back), and the last text, the finishing chunk, the
 * usage and `[DONE]` leave in one write.
 */
export class ChunkWriter {
  private readonly head: string;
  private readonly tail: string;
  private started = false;
  private readonly headers: Record<string, string>;
  /** Tool-call indexes that have been announced (their first delta carries id and type). */
  private readonly announced = new Set<number>();
  private readonly window: TextWindow;

  constructor(
    private readonly res: ServerResponse,
    private readonly model: string,
    private readonly includeUsage: boolean,
    headers: Record<string, string>,
    /** Text that comes within this many ms of a write waits for the next one (0: none waits). */
    windowMs = 0,
    readonly id = newCompletionId(),
    private readonly created = Math.floor(Date.now() / 1000),
  ) {
    this.head = `data: {"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"system_fingerprint":null,"choices":[{"index":0,"delta":`;
    this.tail = includeUsage ? '}],"usage":null}\n\n' : '}]}\n\n';
    this.headers = { ...STREAM_HEADERS, ...headers };
    this.window = new TextWindow(windowMs, (text) => {
      // The window's timer may end after the client left.
      if (!this.res.destroyed) this.res.write(this.opening() + this.textEvent(text));
    });
  }

  get headersSent(): boolean {
    return this.started;
  }

  /** The headers (sent with the next write) and the role chunk, once; `''` afterwards. */
  private opening(): string {
    if (this.started) return '';
    this.started = true;
    this.res.writeHead(200, this.headers);
    return `${this.head}{"role":"assistant","content":""},"logprobs":null,"finish_reason":null${this.tail}`;
  }

  private textEvent(text: string): string {
    return `${this.head}{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null${this.tail}`;
  }

  /** The role chunk and the text waiting in the window (sent before anything else goes out). */
  private before(): string {
    const waiting = this.window.take();
    return this.opening() + (waiting === '' ? '' : this.textEvent(waiting));
  }

  text(text: string): void {
    this.window.push(text);
  }

  /** One fragment of a tool call, as the model streamed it (text before it goes out first). */
  toolDelta(d: ToolCallDelta): void {
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
      `${this.before()}${this.head}{"tool_calls":[${JSON.stringify(call)}]},"logprobs":null,"finish_reason":null${this.tail}`,
    );
  }

  /** A whole tool call in one delta (agents: the call is known whole when it surfaces). */
  toolCall(index: number, t: ToolCall): void {
    this.toolDelta({ index, id: t.id, name: t.name, arguments: t.arguments });
  }

  /** The last text, the finishing chunk, the usage chunk when asked and `[DONE]`, in one write. */
  finish(finishReason: string, usage: CompletionUsage): void {
    let out = `${this.before()}${this.head}{},"logprobs":null,"finish_reason":${JSON.stringify(finishReason)}${this.tail}`;
    if (this.includeUsage) {
      out += `data: {"id":"${this.id}","object":"chat.completion.chunk","created":${this.created},"model":${JSON.stringify(this.model)},"system_fingerprint":null,"choices":[],"usage":${JSON.stringify(usage)}}\n\n`;
    }
    out += 'data: [DONE]\n\n';
    this.res.end(out);
  }

  /**
   * A failure after the stream opened: an `error` event (the official clients raise it as an
   * API error), then the end, without `[DONE]`, so no client takes the reply for complete. Text
   * still in the window is dropped.
   */
  fail(err: OpenAiError): void {
    this.window.take();
    if (!this.started) return;
    this.res.end(`data: ${JSON.stringify(openAiErrorBody(err))}\n\n`);
  }

  /** Stops the window's timer (the client left): nothing more is written. */
  close(): void {
    this.window.take();
  }
}
