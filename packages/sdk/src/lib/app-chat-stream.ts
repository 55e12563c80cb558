import { AiSuiteError } from '../core/errors.js';
import { readServerSentEvents } from '../core/sse.js';
import type { AppChatDoneEvent, AppChatStreamEvent } from '../resources/types.js';

/** An `error` event of the app chat stream (e.g. `MODEL_ERROR`); the user message was kept. */
export class AppChatStreamError extends AiSuiteError {
  override name = 'AppChatStreamError';
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

interface Deferred<T> {
  promise: Promise<T>;
  resolve(v: T): void;
  reject(e: unknown): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {}); // observed through the getters; never an unhandled rejection
  return { promise, resolve, reject };
}

/**
 * The reply of `apps.chatStream()`: an `AsyncIterable` of text tokens. `finalText()` and
 * `done` consume the rest of the stream when nobody iterates it; `events()` yields the raw
 * events. An `error` event throws `AppChatStreamError` from the iteration (and rejects
 * `finalText()` / `done`). `abort()` (or `break`) cancels the request.
 */
export class AppChatStream implements AsyncIterable<string> {
  private started = false;
  private text = '';
  private readonly doneD = deferred<AppChatDoneEvent>();
  private readonly textD = deferred<string>();

  constructor(
    private readonly response: Response,
    private readonly controller: AbortController,
  ) {}

  /** The `x-request-id` of the stream request. */
  get requestId(): string | null {
    return this.response.headers.get('x-request-id');
  }

  /** Every event in order: `token`, then `done` (or `error`, which also throws). */
  async *events(): AsyncGenerator<AppChatStreamEvent> {
    if (this.started) throw new AiSuiteError('This stream has already been consumed');
    this.started = true;
    if (!this.response.body) throw new AiSuiteError('The stream response has no body');
    let finished = false;
    try {
      for await (const sse of readServerSentEvents(this.response.body)) {
        if (!sse.data) continue;
        const event = JSON.parse(sse.data) as AppChatStreamEvent;
        if (event.type === 'token') this.text += event.content;
        if (event.type === 'error') {
          finished = true;
          const err = new AppChatStreamError(event.code, event.message);
          this.fail(err);
          yield event;
          throw err;
        }
        if (event.type === 'done') {
          finished = true;
          this.doneD.resolve(event);
          this.textD.resolve(this.text);
        }
        yield event;
      }
      if (!finished) {
        const err = new AppChatStreamError('STREAM_INTERRUPTED', 'The stream ended before its final event');
        this.fail(err);
        throw err;
      }
    } catch (err) {
      this.fail(err);
      throw err;
    } finally {
      if (!finished) this.controller.abort();
    }
  }

  async *[Symbol.asyncIterator](): AsyncIterator<string> {
    for await (const ev of this.events()) {
      if (ev.type === 'token') yield ev.content;
    }
  }

  /** The `done` event (threadId, turnId, contextWindow, metadata); consumes the stream if needed. */
  get done(): Promise<AppChatDoneEvent> {
    this.drain();
    return this.doneD.promise;
  }

  /** The whole reply text; consumes the stream if needed. */
  finalText(): Promise<string> {
    this.drain();
    return this.textD.promise;
  }

  abort(): void {
    this.controller.abort();
  }

  private drain(): void {
    if (this.started) return;
    void (async () => {
      for await (const _ of this.events()) {
        /* collect */
      }
    })().catch(() => {});
  }

  private fail(err: unknown): void {
    this.doneD.reject(err);
    this.textD.reject(err);
  }
}
