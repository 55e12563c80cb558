import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { Readable, Transform } from 'node:stream';
import { injectTraceHeaders } from '../../telemetry/tracing.js';
import { guardedLookup, isAddressAllowed, OutboundBlockedError, type OutboundPolicy } from './outbound.js';

/**
 * Default of `AGENT_TOOL_RESPONSE_MAX_BYTES`: the largest answer a callback or an MCP server may
 * send to one request (a tool list, a tool result, an event stream).
 */
export const TOOL_RESPONSE_MAX_BYTES = 1024 * 1024;

/** Words every oversized answer's error carries, however a client wraps it. */
export const RESPONSE_TOO_LARGE = 'The response exceeds';

export class ResponseTooLargeError extends Error {
  override name = 'ResponseTooLargeError';
}

const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * A `fetch` for clients that bring their own HTTP code (the MCP SDK's transport) whose every
 * connection goes through the SSRF guard's lookup (`guardedLookup`): the address checked is
 * the address dialled, so a name that resolves to a private address when the connection is
 * made is refused (DNS rebinding), however it resolved when the URL was checked. A response
 * body larger than `maxBytes` ends with `ResponseTooLargeError` as it streams in: nothing
 * reads a whole oversized answer. Redirects are not followed (the response is returned as
 * is: the MCP SDK follows same-origin ones itself, each through this fetch again). Handles what
 * such clients send: a method, headers, a string or bytes body, a signal.
 */
export function guardedFetch(policy: OutboundPolicy, opts: { maxBytes: number }): typeof fetch {
  const lookup = guardedLookup(policy);
  return (async (input: string | URL | Request, init: RequestInit = {}) => {
    if (input instanceof Request) throw new TypeError('guardedFetch takes a URL, not a Request');
    const url = new URL(input);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new OutboundBlockedError('Only http and https URLs are allowed');
    }
    // A name is judged by the lookup as the connection is made; an address literal is never
    // looked up, so it is judged here.
    const literal = url.hostname.replace(/^\[|\]$/g, '');
    if (net.isIP(literal) && !isAddressAllowed(literal, literal, policy)) {
      throw new OutboundBlockedError(`Refusing to connect to ${literal}: private or reserved address`);
    }
    const signal = init.signal ?? undefined;
    signal?.throwIfAborted();
    const body = init.body;
    if (body != null && typeof body !== 'string' && !(body instanceof Uint8Array)) {
      throw new TypeError('guardedFetch sends string or byte bodies only');
    }
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => {
      headers[k] = v;
    });
    if (body != null) headers['content-length'] = String(Buffer.byteLength(body));
    injectTraceHeaders((k, v) => {
      headers[k] = v;
    });
    const mod = url.protocol === 'https:' ? https : http;
    return new Promise<Response>((resolve, reject) => {
      const req = mod.request(
        url,
        { method: init.method ?? 'GET', headers, lookup, agent: false, signal },
        (res) => {
          const status = res.statusCode ?? 502;
          const out = new Headers();
          for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) {
            out.append(res.rawHeaders[i] as string, res.rawHeaders[i + 1] as string);
          }
          if (NULL_BODY.has(status) || init.method === 'HEAD') {
            res.resume();
            resolve(new Response(null, { status, statusText: res.statusMessage, headers: out }));
            return;
          }
          let seen = 0;
          const capped = new Transform({
            transform(chunk: Buffer, _enc, done) {
              seen += chunk.length;
              if (seen > opts.maxBytes) {
                res.destroy();
                done(new ResponseTooLargeError(`${RESPONSE_TOO_LARGE} ${opts.maxBytes} bytes`));
                return;
              }
              done(null, chunk);
            },
          });
          res.on('error', (err) => capped.destroy(err));
          // A reader that cancels the body (the SDK closing an event stream) frees the socket.
          capped.on('close', () => res.destroy());
          res.pipe(capped);
          resolve(
            new Response(Readable.toWeb(capped) as ReadableStream<Uint8Array>, {
              status,
              statusText: res.statusMessage,
              headers: out,
            }),
          );
        },
      );
      req.on('error', reject);
      req.end(body ?? undefined);
    });
  }) as typeof fetch;
}
