import type { ServerResponse } from 'node:http';
import { trackSse } from '../telemetry/metrics.js';

export interface SseMessage {
  data: string;
  event?: string;
  id?: string | number;
  retry?: number;
}

const NO_NEWLINE = /[\r\n]/;

/**
 * Writes `text/event-stream` responses. Multi-line data is split into several `data:` lines;
 * `event` and `id` may not contain CR/LF (they would forge fields). A heartbeat comment keeps
 * idle proxies from closing the connection. Writes after the client left are dropped.
 */
export class SseWriter {
  private heartbeat: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly res: ServerResponse,
    opts: { heartbeatMs?: number; status?: number } = {},
  ) {
    res.statusCode = opts.status ?? 200;
    res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
    res.setHeader('Cache-Control', 'no-cache');
    res.setHeader('Connection', 'keep-alive');
    res.setHeader('X-Accel-Buffering', 'no');
    // The headers go out with the first event, in one write; when none comes within this turn
    // of the event loop, on their own (a client waits for them to know the stream is open).
    // Node's HTTP server already disables Nagle on accepted sockets (`noDelay` default).
    setImmediate(() => {
      if (!res.headersSent && !this.isClosed) res.flushHeaders();
    });
    res.on('close', () => this.stop());
    trackSse(res);
    if (opts.heartbeatMs && opts.heartbeatMs > 0) {
      this.heartbeat = setInterval(() => this.comment('heartbeat'), opts.heartbeatMs);
      this.heartbeat.unref();
    }
  }

  get isClosed(): boolean {
    return this.closed || this.res.writableEnded || this.res.destroyed;
  }

  send(msg: SseMessage): boolean {
    if (this.isClosed) return false;
    let out = '';
    if (msg.event !== undefined) {
      if (NO_NEWLINE.test(msg.event)) throw new Error('SSE event name may not contain a newline');
      out += `event: ${msg.event}\n`;
    }
    if (msg.id !== undefined) {
      const id = String(msg.id);
      if (NO_NEWLINE.test(id)) throw new Error('SSE id may not contain a newline');
      out += `id: ${id}\n`;
    }
    if (msg.retry !== undefined) out += `retry: ${Math.trunc(msg.retry)}\n`;
    for (const line of msg.data.split(/\r\n|\r|\n/)) out += `data: ${line}\n`;
    out += '\n';
    return this.res.write(out);
  }

  /**
   * One JSON event whose SSE `event:` is its `type` (our stream convention). Serialised JSON
   * holds no line break (they are escaped in strings), so it is one `data:` line as it is.
   */
  sendJson(payload: { type: string } & Record<string, unknown>, id?: number): boolean {
    if (this.isClosed) return false;
    const event = payload.type;
    if (NO_NEWLINE.test(event)) throw new Error('SSE event name may not contain a newline');
    const idLine = id === undefined ? '' : `id: ${Math.trunc(id)}\n`;
    return this.res.write(`event: ${event}\n${idLine}data: ${JSON.stringify(payload)}\n\n`);
  }

  comment(text: string): void {
    if (this.isClosed) return;
    this.res.write(`: ${text.replace(/[\r\n]+/g, ' ')}\n\n`);
  }

  end(): void {
    this.stop();
    if (!this.res.writableEnded) this.res.end();
  }

  /** Ends the response so the client sees a failure, not a complete stream. */
  abort(): void {
    this.stop();
    this.res.destroy();
  }

  private stop(): void {
    this.closed = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }
}
