import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedHttpRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  /** Raw body text, exactly as received (for signature checks). */
  rawBody: string;
  /** Parsed JSON body, or undefined when not JSON. */
  body: any;
}

export interface HttpReply {
  status?: number;
  headers?: Record<string, string>;
  /** A string is sent as is (UTF-8), a Buffer byte for byte; anything else as JSON. */
  body?: unknown;
  /** Delay before answering, ms. */
  delayMs?: number;
}

export interface HttpFixture {
  url: string;
  requests: RecordedHttpRequest[];
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A loopback HTTP server answering with `handler`: callback receivers for custom tools,
 * web pages for web_fetch, and the fake search providers are built on it.
 */
export interface HttpFixtureOptions {
  /**
   * Behave like receivers that read exactly `Content-Length` bytes (Python's `http.server`,
   * many webhook frameworks): a request with a body but no `Content-Length` (chunked) is
   * answered 411 and recorded with an empty body.
   */
  requireContentLength?: boolean;
}

export async function startHttpFixture(
  handler: (req: RecordedHttpRequest) => HttpReply | Promise<HttpReply>,
  opts: HttpFixtureOptions = {},
): Promise<HttpFixture> {
  const requests: RecordedHttpRequest[] = [];
  const server = http.createServer(async (req, res) => {
    if (
      opts.requireContentLength &&
      req.headers['content-length'] === undefined &&
      req.headers['transfer-encoding']
    ) {
      req.resume();
      requests.push({
        method: req.method ?? 'GET',
        path: req.url ?? '/',
        headers: req.headers,
        rawBody: '',
        body: undefined,
      });
      res.writeHead(411, { 'content-type': 'text/plain' }).end('Length Required');
      return;
    }
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const rawBody = Buffer.concat(chunks).toString('utf8');
    let body: unknown;
    try {
      body = rawBody ? JSON.parse(rawBody) : undefined;
    } catch {
      body = undefined;
    }
    const rec: RecordedHttpRequest = {
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: req.headers,
      rawBody,
      body,
    };
    requests.push(rec);
    try {
      const reply = await handler(rec);
      if (reply.delayMs) await sleep(reply.delayMs);
      if (Buffer.isBuffer(reply.body)) {
        res.writeHead(reply.status ?? 200, { 'content-type': 'application/octet-stream', ...reply.headers });
        res.end(reply.body);
        return;
      }
      const isText = typeof reply.body === 'string';
      res.writeHead(reply.status ?? 200, {
        'content-type': isText ? 'text/plain; charset=utf-8' : 'application/json',
        ...reply.headers,
      });
      res.end(isText ? (reply.body as string) : JSON.stringify(reply.body ?? null));
    } catch (err) {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: String(err) }));
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
