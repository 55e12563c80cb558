import type { AiSuite } from '../client.js';
import { AiSuiteError, APIConnectionError, APIUserAbortError } from '../core/errors.js';
import { readTextChunks } from '../core/sse.js';
import type { ChatMessage } from './types.js';

export interface ChatStreamParams {
  /** At least one message; the last must have non-empty content. */
  messages: ChatMessage[];
  /** Model id; the server's default chat model when omitted. */
  model?: string;
}

export interface ChatStreamOptions {
  signal?: AbortSignal;
  /** Retries before the stream starts (429, 5xx, connection errors); default the client's. */
  maxRetries?: number;
  /** Timeout for the response headers, ms. */
  timeout?: number;
}

/**
 * A streamed `/chat` reply: iterate it for text chunks (`for await (const text of stream)`),
 * or `await stream.finalText()` for the whole reply. Leaving the loop early (`break`) or
 * aborting the signal cancels the request, which stops the model upstream.
 *
 * Errors: `BadRequestError` (400), `AuthenticationError` (401), `InsufficientCreditsError`
 * (402), `PermissionDeniedError` (403, e.g. `Token limit exceeded`), `RateLimitError` (429),
 * `BadGatewayError` (502), `ServiceUnavailableError` (503) before the first chunk; a reply
 * cut off by the server after it started throws `APIConnectionError`, never ends quietly.
 */
export class ChatStream implements AsyncIterable<string> {
  private readonly controller = new AbortController();
  private readonly responsePromise: Promise<Response>;
  private consumed = false;
  private text = '';
  private finalPromise: Promise<string> | undefined;
  private resolveFinal!: (text: string) => void;
  private rejectFinal!: (err: unknown) => void;
  private readonly done: Promise<string>;

  constructor(client: AiSuite, params: ChatStreamParams, opts: ChatStreamOptions = {}) {
    const onAbort = () => this.controller.abort();
    if (opts.signal?.aborted) this.controller.abort();
    else opts.signal?.addEventListener('abort', onAbort, { once: true });
    this.responsePromise = client.requestRaw({
      method: 'POST',
      path: '/chat',
      body: params,
      headers: { accept: 'text/event-stream' },
      signal: this.controller.signal,
      maxRetries: opts.maxRetries,
      timeout: opts.timeout,
    });
    // The caller may never read it: do not let a failure become an unhandled rejection.
    this.responsePromise.catch(() => {});
    this.done = new Promise<string>((resolve, reject) => {
      this.resolveFinal = resolve;
      this.rejectFinal = reject;
    });
    this.done.catch(() => {});
  }

  /** The HTTP response (status, `RateLimit-*` and `X-Request-Id` headers) once it arrives. */
  response(): Promise<Response> {
    return this.responsePromise;
  }

  /** Cancels the request (same as `break` out of the loop). */
  abort(): void {
    this.controller.abort();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<string, void, undefined> {
    if (this.consumed) throw new AiSuiteError('A chat stream can be iterated only once');
    this.consumed = true;
    let finished = false;
    try {
      const res = await this.responsePromise;
      if (!res.body) {
        finished = true;
        this.resolveFinal('');
        return;
      }
      try {
        for await (const chunk of readTextChunks(res.body)) {
          this.text += chunk;
          yield chunk;
        }
      } catch (err) {
        if (this.controller.signal.aborted) throw new APIUserAbortError();
        throw new APIConnectionError('The chat stream ended before the reply was complete.', { cause: err });
      }
      finished = true;
      this.resolveFinal(this.text);
    } catch (err) {
      this.rejectFinal(err);
      throw err;
    } finally {
      if (!finished) {
        // `break`, a thrown error or an abort: stop the request so the model stops too.
        this.controller.abort();
        this.rejectFinal(new APIUserAbortError());
      }
    }
  }

  /** The whole reply (reads the stream to the end if nobody iterates it). */
  finalText(): Promise<string> {
    if (!this.finalPromise) {
      if (!this.consumed) {
        this.finalPromise = (async () => {
          for await (const _ of this) {
            /* accumulate */
          }
          return this.text;
        })();
      } else {
        this.finalPromise = this.done;
      }
    }
    return this.finalPromise;
  }
}

/** `POST /chat`: streamed plain-text chat completions (token-metered). */
export class Chat {
  constructor(private readonly client: AiSuite) {}

  stream(params: ChatStreamParams, opts: ChatStreamOptions = {}): ChatStream {
    return new ChatStream(this.client, params, opts);
  }
}
