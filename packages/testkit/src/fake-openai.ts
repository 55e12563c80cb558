import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A fake OpenAI-compatible HTTP server for tests, examples and benchmarks. It speaks the real
 * wire protocol (`/v1/chat/completions` streaming and not, `/v1/embeddings`, `/v1/models`),
 * so the `openai` SDK is exercised end to end, never stubbed in-process.
 *
 * Replies are scripted: `script(...)` queues replies consumed one per chat request, in order;
 * when the queue is empty the default reply is used.
 */

export interface FakeToolCall {
  id?: string;
  name: string;
  /** JSON text of the arguments; streamed in several argument fragments. */
  arguments: string;
}

export interface FakeUpstreamError {
  status: number;
  message: string;
  type?: string;
  code?: string | null;
}

export interface FakeChatReply {
  /** Text of the reply: a string (split into `chunkSize`-character chunks) or explicit chunks. */
  text?: string | string[];
  /** Characters per chunk when `text` is a string (default 4). */
  chunkSize?: number;
  toolCalls?: FakeToolCall[];
  /**
   * Usage to report: explicit numbers, `false` for none (even when asked), or `'auto'`
   * (default): prompt ≈ characters of the messages / 4, completion = number of chunks.
   */
  usage?: { prompt_tokens: number; completion_tokens: number } | false | 'auto';
  /** Delay between streamed chunks, ms. */
  paceMs?: number;
  /**
   * How `paceMs` is kept. `'gaps'` (default): each chunk `paceMs` after the previous one was
   * written, so a timer that fires late (this process waiting for a core) delays every chunk
   * after it. `'rate'`: chunk i is due `paceMs × (i + 1)` after the first content chunk's
   * turn, as a provider generating at its own rate; a late chunk does not delay the next ones
   * (they go out as soon as they are due).
   */
  paceSchedule?: 'gaps' | 'rate';
  /** Delay before the response headers (first byte), ms. */
  delayMs?: number;
  /**
   * Streamed only: after the headers and the first (role) delta, wait for this promise before
   * the content: lets a test hold many replies open at once and release them together.
   */
  waitFor?: Promise<unknown>;
  /** Never answer (until the client goes away). */
  hang?: boolean;
  /** Answer with this HTTP error and an OpenAI error body. */
  error?: FakeUpstreamError;
  /** Streamed only: destroy the connection after this many content chunks. */
  failAfterChunks?: number;
  finishReason?: string;
}

export interface FakeEmbeddingReply {
  error?: FakeUpstreamError;
  /** With `error`: the `Retry-After` header to send (seconds or an HTTP date). */
  retryAfter?: string;
  /** Close the connection without answering (the client sees a connection reset). */
  reset?: boolean;
  delayMs?: number;
  /** Never answer (until the client goes away). */
  hang?: boolean;
  usage?: { prompt_tokens: number } | false;
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  /** Parsed JSON body (or the raw text when not JSON). */
  body: any;
  /** True once the client closed the connection before the reply was complete. */
  aborted: boolean;
  /** True once the full reply was written. */
  completed: boolean;
  /** Content chunks written to this request (streaming). */
  chunksSent: number;
  /**
   * A paced streamed reply, once complete: how much later its last content chunk was written
   * than `paceMs × chunks` after the content began (ms): the fake's own delay.
   */
  lateMs?: number;
}

export interface FakeOpenAIOptions {
  /** Reply when the script is empty (default: text "Hello from the fake model."). */
  defaultReply?: FakeChatReply | ((body: any) => FakeChatReply);
  /** Embedding vector dimension (default 64). */
  embeddingDimensions?: number;
  /** Required bearer token; requests with another answer 401 (default: any). */
  apiKey?: string;
  port?: number;
  /** Called when a streamed reply has been written in full (after `lateMs` is set). */
  onStreamed?: (rec: RecordedRequest) => void;
  /** The clock pacing uses (default: `performance.now()` and `setTimeout`); tests drive their own. */
  clock?: FakeClock;
}

/** What pacing reads the time from and waits on. */
export interface FakeClock {
  /** Milliseconds from any fixed origin. */
  now(): number;
  sleep(ms: number): Promise<void>;
}

export interface FakeOpenAI {
  /** Base URL including `/v1`, for `OPENAI_BASE_URL`. */
  url: string;
  requests: RecordedRequest[];
  /** Queues chat replies, consumed one per chat completion request. */
  script(...replies: (FakeChatReply | ((body: any) => FakeChatReply))[]): void;
  /** Queues embedding replies, consumed one per embeddings request. */
  scriptEmbeddings(...replies: FakeEmbeddingReply[]): void;
  /** Clears scripts and recorded requests. */
  reset(): void;
  /** Resolves when `n` chat requests have been received. */
  waitForRequests(n: number): Promise<void>;
  close(): Promise<void>;
}

const DEFAULT_REPLY: FakeChatReply = { text: 'Hello from the fake model.' };

function chunkText(reply: FakeChatReply): string[] {
  if (reply.text === undefined) return [];
  if (Array.isArray(reply.text)) return reply.text;
  const size = Math.max(1, reply.chunkSize ?? 4);
  const out: string[] = [];
  for (let i = 0; i < reply.text.length; i += size) out.push(reply.text.slice(i, i + size));
  return out;
}

function promptChars(body: any): number {
  let n = 0;
  for (const m of Array.isArray(body?.messages) ? body.messages : []) {
    if (typeof m?.content === 'string') n += m.content.length;
    else if (Array.isArray(m?.content)) {
      for (const part of m.content) if (typeof part?.text === 'string') n += part.text.length;
    }
  }
  return n;
}

const STOPWORDS = new Set(
  'a an and are as at be by did does do for from has have how in is it its of on or that the this to was were what when where which who why will with'.split(
    ' ',
  ),
);

/**
 * A deterministic unit vector per text: a hashed bag of words (each word, lower-cased and
 * without common stop words, adds ±1 to the dimension its hash picks), so texts sharing
 * words are near each other and the same text always gets the same vector. A text without
 * words gets a vector hashed from its characters.
 */
function embedText(text: string, dims: number): number[] {
  const out: number[] = new Array<number>(dims).fill(0);
  const words = text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];
  for (const w of words) {
    if (STOPWORDS.has(w)) continue;
    const h = createHash('sha256').update(w).digest();
    const i = h.readUInt32BE(0) % dims;
    out[i] = (out[i] ?? 0) + (h[4] !== undefined && h[4] & 1 ? -1 : 1);
  }
  if (!out.some((v) => v !== 0)) {
    const seed = createHash('sha256').update(text).digest();
    for (let i = 0; i < dims; i++) out[i] = (seed[i % seed.length] ?? 0) - 127.5;
  }
  const norm = Math.sqrt(out.reduce((s, v) => s + v * v, 0)) || 1;
  return out.map((v) => v / norm);
}

/** Flushes what was written, then closes the socket mid-body: the client sees a broken stream. */
function breakConnection(res: http.ServerResponse) {
  const socket = res.socket;
  if (socket) socket.end();
  else res.destroy();
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const realClock: FakeClock = { now: () => performance.now(), sleep };

export async function startFakeOpenAI(opts: FakeOpenAIOptions = {}): Promise<FakeOpenAI> {
  const chatScript: (FakeChatReply | ((body: any) => FakeChatReply))[] = [];
  const embedScript: FakeEmbeddingReply[] = [];
  const requests: RecordedRequest[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const dims = opts.embeddingDimensions ?? 64;
  const clock = opts.clock ?? realClock;
  const sockets = new Set<import('node:net').Socket>();

  const chatCount = () => requests.filter((r) => r.path.endsWith('/chat/completions')).length;
  const notify = () => {
    for (const w of [...waiters]) {
      if (chatCount() >= w.n) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
  };

  const sendError = (res: http.ServerResponse, e: FakeUpstreamError, retryAfter?: string) => {
    res.writeHead(e.status, {
      'content-type': 'application/json',
      ...(retryAfter !== undefined ? { 'retry-after': retryAfter } : {}),
    });
    res.end(
      JSON.stringify({
        error: {
          message: e.message,
          type: e.type ?? 'invalid_request_error',
          param: null,
          code: e.code ?? null,
        },
      }),
    );
  };

  async function handleChat(req: http.IncomingMessage, res: http.ServerResponse, rec: RecordedRequest) {
    const body = rec.body ?? {};
    const next = chatScript.shift() ?? opts.defaultReply ?? DEFAULT_REPLY;
    const reply = typeof next === 'function' ? next(body) : next;
    if (reply.hang) {
      await new Promise<void>((r) => req.socket.once('close', () => r()));
      return;
    }
    if (reply.delayMs) await sleep(reply.delayMs);
    if (rec.aborted) return;
    if (reply.error) {
      sendError(res, reply.error);
      rec.completed = true;
      return;
    }
    const id = `chatcmpl-${randomBytes(8).toString('hex')}`;
    const created = Math.floor(Date.now() / 1000);
    const model = typeof body.model === 'string' ? body.model : 'fake';
    const chunks = chunkText(reply);
    const toolCalls = (reply.toolCalls ?? []).map((t) => ({
      ...t,
      id: t.id ?? `call_${randomBytes(6).toString('hex')}`,
    }));
    const finish = reply.finishReason ?? (toolCalls.length > 0 ? 'tool_calls' : 'stop');
    const usage =
      reply.usage === false
        ? undefined
        : reply.usage === undefined || reply.usage === 'auto'
          ? { prompt_tokens: Math.ceil(promptChars(body) / 4), completion_tokens: Math.max(1, chunks.length) }
          : reply.usage;
    const usageBody = usage && { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens };

    if (!body.stream) {
      const text = chunks.join('');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id,
          object: 'chat.completion',
          created,
          model,
          choices: [
            {
              index: 0,
              message: {
                role: 'assistant',
                content: text.length > 0 || toolCalls.length === 0 ? text : null,
                ...(toolCalls.length > 0
                  ? {
                      tool_calls: toolCalls.map((t) => ({
                        id: t.id,
                        type: 'function',
                        function: { name: t.name, arguments: t.arguments },
                      })),
                    }
                  : {}),
                refusal: null,
              },
              finish_reason: finish,
              logprobs: null,
            },
          ],
          ...(usageBody ? { usage: usageBody } : {}),
        }),
      );
      rec.completed = true;
      return;
    }

    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
    res.socket?.setNoDelay(true);
    const frame = (choices: unknown[], extra: Record<string, unknown> = {}) =>
      `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices, ...extra })}\n\n`;
    const delta = (d: Record<string, unknown>, finishReason: string | null = null) =>
      frame([{ index: 0, delta: d, finish_reason: finishReason, logprobs: null }]);

    // The first delta carries the role (the SDK's stream helpers rely on it).
    res.write(delta({ role: 'assistant', content: '' }));
    if (reply.waitFor) await reply.waitFor;
    let sent = 0;
    const paceMs = reply.paceMs ?? 0;
    const contentFrom = clock.now();
    for (const c of chunks) {
      if (rec.aborted) return;
      if (reply.failAfterChunks !== undefined && sent >= reply.failAfterChunks) {
        breakConnection(res);
        return;
      }
      if (paceMs > 0) {
        const wait = reply.paceSchedule === 'rate' ? contentFrom + paceMs * (sent + 1) - clock.now() : paceMs;
        if (wait > 0) await clock.sleep(wait);
      }
      if (rec.aborted) return;
      res.write(delta({ content: c }));
      sent++;
      rec.chunksSent = sent;
    }
    if (paceMs > 0 && sent > 0) rec.lateMs = clock.now() - contentFrom - paceMs * sent;
    if (reply.failAfterChunks !== undefined && sent >= reply.failAfterChunks) {
      breakConnection(res);
      return;
    }
    toolCalls.forEach((t, index) => {
      res.write(
        delta({
          tool_calls: [{ index, id: t.id, type: 'function', function: { name: t.name, arguments: '' } }],
        }),
      );
      // Arguments arrive in fragments, as from real models.
      const step = Math.max(1, Math.ceil(t.arguments.length / 3));
      for (let i = 0; i < t.arguments.length; i += step) {
        res.write(
          delta({ tool_calls: [{ index, function: { arguments: t.arguments.slice(i, i + step) } }] }),
        );
      }
    });
    res.write(delta({}, finish));
    if (body.stream_options?.include_usage && usageBody) res.write(frame([], { usage: usageBody }));
    res.end('data: [DONE]\n\n');
    rec.completed = true;
    opts.onStreamed?.(rec);
  }

  async function handleEmbeddings(req: http.IncomingMessage, res: http.ServerResponse, rec: RecordedRequest) {
    const reply = embedScript.shift() ?? {};
    if (reply.hang) {
      await new Promise<void>((r) => req.socket.once('close', () => r()));
      return;
    }
    if (reply.delayMs) await sleep(reply.delayMs);
    if (reply.reset) {
      req.socket.destroy();
      return;
    }
    if (reply.error) {
      sendError(res, reply.error, reply.retryAfter);
      return;
    }
    const input: string[] = Array.isArray(rec.body?.input) ? rec.body.input : [String(rec.body?.input ?? '')];
    const tokens = input.reduce((s, t) => s + Math.ceil(String(t).length / 4), 0);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        object: 'list',
        model: rec.body?.model ?? 'fake-embed',
        data: input.map((t, index) => ({
          object: 'embedding',
          index,
          embedding: embedText(String(t), dims),
        })),
        ...(reply.usage === false
          ? {}
          : { usage: { prompt_tokens: reply.usage?.prompt_tokens ?? tokens, total_tokens: tokens } }),
      }),
    );
    rec.completed = true;
  }

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body: any = raw;
      try {
        body = raw ? JSON.parse(raw) : undefined;
      } catch {
        /* keep the text */
      }
      const path = (req.url ?? '/').split('?')[0] ?? '/';
      const rec: RecordedRequest = {
        method: req.method ?? 'GET',
        path,
        headers: req.headers,
        body,
        aborted: false,
        completed: false,
        chunksSent: 0,
      };
      res.on('close', () => {
        if (!rec.completed) rec.aborted = true;
      });
      requests.push(rec);
      notify();
      if (opts.apiKey && req.headers.authorization !== `Bearer ${opts.apiKey}`) {
        sendError(res, { status: 401, message: 'Incorrect API key provided', type: 'invalid_request_error' });
        return;
      }
      let work: Promise<void>;
      if (req.method === 'POST' && path.endsWith('/chat/completions')) work = handleChat(req, res, rec);
      else if (req.method === 'POST' && path.endsWith('/embeddings')) work = handleEmbeddings(req, res, rec);
      else if (req.method === 'GET' && path.endsWith('/models')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [] }));
        work = Promise.resolve();
      } else {
        sendError(res, { status: 404, message: `Unknown path ${path}`, type: 'invalid_request_error' });
        work = Promise.resolve();
      }
      work.catch(() => res.destroy());
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve) => server.listen(opts.port ?? 0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    script(...replies) {
      chatScript.push(...replies);
    },
    scriptEmbeddings(...replies) {
      embedScript.push(...replies);
    },
    reset() {
      chatScript.length = 0;
      embedScript.length = 0;
      requests.length = 0;
    },
    waitForRequests(n) {
      return new Promise<void>((resolve) => {
        waiters.push({ n, resolve });
        notify();
      });
    },
    close() {
      return new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      });
    },
  };
}

/** The server environment that points the service at a fake upstream (model id `fake-chat`). */
export function fakeOpenAIEnv(fake: { url: string }): Record<string, string> {
  return {
    OPENAI_BASE_URL: fake.url,
    OPENAI_API_KEY: 'test',
    CHAT_MODEL: 'fake-chat',
    EMBEDDING_MODEL: 'fake-embed',
    // $1 / $2 per million tokens: 1 micro-dollar per input token, 2 per output token.
    CHAT_MODEL_INPUT_PRICE_PER_MTOK: '1',
    CHAT_MODEL_OUTPUT_PRICE_PER_MTOK: '2',
    EMBEDDING_MODEL_PRICE_PER_MTOK: '1',
    LLM_MAX_RETRIES: '0',
  };
}
