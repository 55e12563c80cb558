import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { SseWriter } from './sse.js';

let server: http.Server | undefined;
afterEach(async () => {
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = undefined;
});

/** Serves one response written by `handler`; returns what a client received. */
async function serve(handler: (res: http.ServerResponse) => void | Promise<void>) {
  server = http.createServer((_req, res) => void handler(res));
  await new Promise<void>((r) => server?.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return new Promise<{ body: string }>((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          body += d;
        });
        res.on('end', () => resolve({ body }));
      })
      .on('error', reject);
  });
}

describe('SseWriter', () => {
  it('writes events with their ids, multi-line data as several data lines, comments, in order', async () => {
    const got = await serve(async (res) => {
      const sse = new SseWriter(res);
      sse.sendJson({ type: 'message.delta', text: 'a' }, 1);
      sse.send({ event: 'note', data: 'two\nlines' });
      await new Promise((r) => setTimeout(r, 5));
      sse.comment('heart\nbeat');
      sse.sendJson({ type: 'run.completed' }, 2);
      sse.end();
    });
    expect(got.body).toBe(
      'event: message.delta\nid: 1\ndata: {"type":"message.delta","text":"a"}\n\n' +
        'event: note\ndata: two\ndata: lines\n\n' +
        ': heart beat\n\n' +
        'event: run.completed\nid: 2\ndata: {"type":"run.completed"}\n\n',
    );
  });

  it('refuses an event name or id that would forge a field', async () => {
    await serve((res) => {
      const sse = new SseWriter(res);
      expect(() => sse.send({ event: 'a\ndata: x', data: '' })).toThrow(
        'SSE event name may not contain a newline',
      );
      expect(() => sse.send({ id: '1\r', data: '' })).toThrow('SSE id may not contain a newline');
      expect(() => sse.sendJson({ type: 'x\ny' })).toThrow('SSE event name may not contain a newline');
      sse.end();
    });
  });

  it('drops what is written after the end, without throwing', async () => {
    const got = await serve((res) => {
      const sse = new SseWriter(res);
      sse.sendJson({ type: 'run.started' }, 1);
      sse.end();
      expect(sse.sendJson({ type: 'late' })).toBe(false);
      sse.comment('late');
    });
    expect(got.body).toBe('event: run.started\nid: 1\ndata: {"type":"run.started"}\n\n');
  });
});
