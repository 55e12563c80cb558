import http from 'node:http';
import https from 'node:https';
import { Readable } from 'node:stream';
import { injectTraceHeaders } from '../telemetry/tracing.js';
import { isStaleSocketError } from './sse-client.js';

const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * A minimal `fetch` for the `openai` SDK on Node's own HTTP client (keep-alive agents, the
 * native llhttp parser). The global `fetch` (undici) costs several times more CPU per streamed
 * reply, which is most of the gateway's overhead on `/chat`. Handles what the SDK sends for
 * chat and embeddings (method, headers, a string/bytes body, `signal` before and during the
 * body); anything else (streamed or multipart bodies) goes to the global fetch.
 */
export function createHttpFetch(opts: { maxSockets?: number } = {}): typeof fetch {
  const agents = {
    'http:': new http.Agent({ keepAlive: true, maxSockets: opts.maxSockets ?? 256 }),
    'https:': new https.Agent({ keepAlive: true, maxSockets: opts.maxSockets ?? 256 }),
  };
  const plainBody = (b: unknown) =>
    b === undefined ||
    b === null ||
    typeof b === 'string' ||
    b instanceof Uint8Array ||
    b instanceof ArrayBuffer;
  return ((input: string | URL | Request, init: RequestInit = {}) => {
    // Streams, FormData (file uploads) and Request objects: leave them to the global fetch.
    if (input instanceof Request || !plainBody(init.body)) return fetch(input, init);
    // A keep-alive connection the upstream closed as the request was written on it: sent again
    // on a new connection (see `StaleSocketError` in sse-client.ts).
    const go = (staleLeft: number): Promise<Response> =>
      new Promise<Response>((resolve, reject) => {
        const url = new URL(input);
        const mod = url.protocol === 'https:' ? https : http;
        const agent = agents[url.protocol as 'http:' | 'https:'];
        if (!agent) {
          reject(new TypeError(`Unsupported protocol ${url.protocol}`));
          return;
        }
        const headers: Record<string, string> = {};
        new Headers(init.headers).forEach((v, k) => {
          headers[k] = v;
        });
        const signal = init.signal ?? undefined;
        if (signal?.aborted) {
          reject(signal.reason ?? new DOMException('This operation was aborted', 'AbortError'));
          return;
        }
        let responded = false;
        injectTraceHeaders((k, v) => {
          headers[k] = v;
        });
        const req = mod.request(url, { method: init.method ?? 'GET', headers, agent, signal }, (res) => {
          responded = true;
          const status = res.statusCode ?? 500;
          const h = new Headers();
          for (const [k, v] of Object.entries(res.headers)) {
            if (Array.isArray(v)) for (const item of v) h.append(k, item);
            else if (v !== undefined) h.set(k, v);
          }
          let body: ReadableStream<Uint8Array> | null = null;
          if (NULL_BODY.has(status) || init.method === 'HEAD') res.resume();
          else body = Readable.toWeb(res) as unknown as ReadableStream<Uint8Array>;
          resolve(new Response(body, { status, statusText: res.statusMessage, headers: h }));
        });
        req.on('error', (err) => {
          if (
            !responded &&
            req.reusedSocket &&
            isStaleSocketError(err) &&
            staleLeft > 0 &&
            !signal?.aborted
          ) {
            resolve(go(staleLeft - 1));
          } else reject(err);
        });
        const b = init.body;
        if (b === undefined || b === null) req.end();
        else if (typeof b === 'string' || b instanceof Uint8Array) req.end(b);
        else req.end(Buffer.from(b as ArrayBuffer));
      });
    return go(3);
  }) as typeof fetch;
}
