import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import { createParser } from 'eventsource-parser';
import { traceOutgoing } from '../telemetry/tracing.js';

/**
 * The upstream's non-2xx answer: status, the parsed JSON body (when it was JSON) and a message
 * in the shape the `openai` SDK gives its `APIError` (`error.message`, else the status line).
 */
export class UpstreamHttpError extends Error {
  override readonly name = 'UpstreamHttpError';
  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly headers: http.IncomingHttpHeaders,
  ) {
    super(UpstreamHttpError.describe(status, body));
  }

  static describe(status: number, body: unknown): string {
    const b = body as { error?: { message?: unknown } | string; message?: unknown } | undefined;
    const inner = typeof b?.error === 'object' ? b.error?.message : (b?.error ?? b?.message);
    if (typeof inner === 'string' && inner) return inner;
    return typeof body === 'string' && body
      ? `${status} ${body.slice(0, 200)}`
      : `${status} status code (no body)`;
  }
}

/** Before the response headers arrive within `timeoutMs`. */
export class UpstreamTimeoutError extends Error {
  override readonly name = 'TimeoutError';
  constructor() {
    super('Request timed out.');
  }
}

/** The stream ended without its end (connection cut mid-reply). */
export class UpstreamStreamError extends Error {
  override readonly name = 'UpstreamStreamError';
  constructor(readonly code = 'ECONNRESET') {
    super('The upstream stream ended prematurely');
  }
}

export interface SsePostOptions {
  url: URL;
  headers: Record<string, string>;
  body: string;
  signal?: AbortSignal;
  /** Until the response headers (the SDK's meaning for streams). */
  timeoutMs: number;
  /** Retries before the first byte: connection errors, timeouts, 408/409/429/5xx. */
  maxRetries: number;
}

const agents = {
  'http:': new http.Agent({ keepAlive: true, maxSockets: 256 }),
  'https:': new https.Agent({ keepAlive: true, maxSockets: 256 }),
};

const abortError = (signal: AbortSignal) =>
  signal.reason instanceof Error && signal.reason.name === 'AbortError'
    ? signal.reason
    : new DOMException('This operation was aborted', 'AbortError');

const ERROR_BODY_LIMIT = 64 * 1024;

function readErrorBody(res: IncomingMessage): Promise<unknown> {
  return new Promise((resolve) => {
    let text = '';
    res.setEncoding('utf8');
    res.on('data', (s: string) => {
      if (text.length < ERROR_BODY_LIMIT) text += s;
    });
    const done = () => {
      try {
        resolve(JSON.parse(text));
      } catch {
        resolve(text);
      }
    };
    res.on('end', done);
    res.on('error', done);
    res.on('aborted', done);
  });
}

/** Sends one request; resolves with the response when its headers arrive. */
function send(opts: SsePostOptions): Promise<{ req: http.ClientRequest; res: IncomingMessage }> {
  return new Promise((resolve, reject) => {
    const agent = agents[opts.url.protocol as 'http:' | 'https:'];
    if (!agent) {
      reject(new TypeError(`Unsupported protocol ${opts.url.protocol}`));
      return;
    }
    const mod = opts.url.protocol === 'https:' ? https : http;
    const req = mod.request(opts.url, {
      method: 'POST',
      agent,
      headers: { ...opts.headers, 'content-length': String(Buffer.byteLength(opts.body)) },
    });
    traceOutgoing(req);
    const timer = setTimeout(() => req.destroy(new UpstreamTimeoutError()), opts.timeoutMs);
    const onAbort = () => req.destroy(abortError(opts.signal as AbortSignal));
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    const settle = () => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
    };
    req.once('response', (res) => {
      settle();
      // From here on a failure shows on the response (`close` without `complete`); a late
      // socket error on the request must not be an unhandled 'error' event.
      req.on('error', () => {});
      resolve({ req, res });
    });
    req.once('error', (err) => {
      settle();
      reject(req.reusedSocket && isStaleSocketError(err) ? new StaleSocketError(err) : err);
    });
    req.end(opts.body);
  });
}

/**
 * A keep-alive connection the upstream closed (its idle timeout) just as a request was written
 * on it: the request failed before any response and was never processed, so it is sent again
 * on a new connection at once, whatever `maxRetries` says (Node's documented use of
 * `request.reusedSocket`). Under load this race showed as `AI service is temporarily
 * unavailable` (bench/streaming, decision 0036).
 */
export class StaleSocketError extends Error {
  override readonly name = 'StaleSocketError';
  readonly code: string | undefined;
  constructor(readonly original: Error) {
    super(original.message);
    this.code = (original as { code?: string }).code;
  }
}
export const isStaleSocketError = (err: unknown) => {
  const code = (err as { code?: string } | undefined)?.code;
  return code === 'ECONNRESET' || code === 'EPIPE';
};
/** How many times in a row a request is re-sent after a stale keep-alive connection. */
const STALE_RETRIES = 3;

const RETRYABLE = (status: number) => status === 408 || status === 409 || status === 429 || status >= 500;

function retryDelayMs(attempt: number, headers?: http.IncomingHttpHeaders): number {
  const afterMs = headers?.['retry-after-ms'];
  const afterS = headers?.['retry-after'];
  const ms =
    afterMs !== undefined ? Number(afterMs) : afterS !== undefined ? Number(afterS) * 1000 : Number.NaN;
  if (ms >= 0 && ms <= 60_000) return ms; // false for NaN
  // 0.5 s doubling to at most 8 s, with up to 25 % jitter off (as the openai SDK does).
  return Math.min(500 * 2 ** attempt, 8000) * (1 - Math.random() * 0.25);
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(t);
      reject(abortError(signal as AbortSignal));
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/**
 * POSTs a JSON body and reads the `text/event-stream` answer, calling `onData` synchronously
 * with each event's `data` (the `[DONE]` sentinel is swallowed), then `onRead` once per network
 * read (events that arrived together: one write downstream, not one per event). Node's HTTP client with
 * keep-alive agents and `eventsource-parser`: no web streams, no async iterator, no per-event
 * promise; this is the gateway's chunk path (decision 0014). Retries like the `openai` SDK
 * before the response starts; afterwards a failure rejects (`UpstreamStreamError`), never ends
 * quietly. Aborting `signal` destroys the request and rejects with an `AbortError`.
 */
export async function postEventStream(
  opts: SsePostOptions,
  onData: (data: string) => void,
  /** After the events of one network read: a caller batching its writes flushes here. */
  onRead?: () => void,
): Promise<void> {
  let attempt = 0;
  let stale = 0;
  let res: IncomingMessage;
  let req: http.ClientRequest;
  for (;;) {
    if (opts.signal?.aborted) throw abortError(opts.signal);
    try {
      ({ req, res } = await send(opts));
    } catch (err) {
      if (opts.signal?.aborted) throw abortError(opts.signal);
      if (err instanceof StaleSocketError && stale++ < STALE_RETRIES) continue;
      if (err instanceof StaleSocketError) throw err.original;
      if (attempt >= opts.maxRetries) throw err;
      await sleep(retryDelayMs(attempt++), opts.signal);
      continue;
    }
    const status = res.statusCode ?? 500;
    if (status >= 200 && status < 300) break;
    const body = await readErrorBody(res);
    const retry = res.headers['x-should-retry'];
    const retryable = retry === 'true' || (retry !== 'false' && RETRYABLE(status));
    if (!retryable || attempt >= opts.maxRetries) throw new UpstreamHttpError(status, body, res.headers);
    await sleep(retryDelayMs(attempt++, res.headers), opts.signal);
  }

  await new Promise<void>((resolve, reject) => {
    let failed = false;
    const fail = (err: unknown) => {
      if (failed) return;
      failed = true;
      opts.signal?.removeEventListener('abort', onAbort);
      req.destroy();
      reject(err);
    };
    const onAbort = () => fail(abortError(opts.signal as AbortSignal));
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    const parser = createParser({
      onEvent(event) {
        if (event.data !== '[DONE]') onData(event.data);
      },
    });
    res.setEncoding('utf8');
    res.on('data', (text: string) => {
      if (failed) return;
      try {
        parser.feed(text);
        onRead?.();
      } catch (err) {
        fail(err);
      }
    });
    res.on('error', (err) => fail(opts.signal?.aborted ? abortError(opts.signal) : err));
    res.on('close', () => {
      if (failed) return;
      if (opts.signal?.aborted) return fail(abortError(opts.signal));
      if (!res.complete) return fail(new UpstreamStreamError());
      failed = true; // settled
      opts.signal?.removeEventListener('abort', onAbort);
      resolve();
    });
  });
}
