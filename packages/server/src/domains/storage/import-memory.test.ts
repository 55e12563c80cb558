import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

const MB = 1024 * 1024;
const SIZE = 300 * MB;
let ts: TestServer;
let ws: TestWorkspace;
beforeAll(async () => {
  ts = await startTestServer();
  ws = await createTestWorkspace(ts);
});
afterAll(() => ts?.close());

/** A multipart body generated on the fly: `SIZE` bytes of one file part, never in memory at once. */
function multipartStream(boundary: string, filename: string): ReadableStream<Uint8Array> {
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="pathPrefix"\r\n\r\n/big\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file[]"; filename="${filename}"\r\n` +
      'Content-Type: application/octet-stream\r\n\r\n',
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const chunk = Buffer.alloc(MB, 0x61);
  let sent = 0;
  let stage = 0;
  return new ReadableStream({
    pull(controller) {
      if (stage === 0) {
        controller.enqueue(new Uint8Array(head));
        stage = 1;
      } else if (stage === 1) {
        const n = Math.min(MB, SIZE - sent);
        controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, n));
        sent += n;
        if (sent >= SIZE) stage = 2;
      } else {
        controller.enqueue(new Uint8Array(tail));
        controller.close();
      }
    },
  });
}

describe('streamed import', () => {
  it('imports a 300 MB file with bounded memory (peak RSS growth < 100 MB)', async () => {
    const boundary = `----aisuite${Date.now()}`;
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 5);
    let res: Response;
    try {
      res = await fetch(`${ts.url}/api/v1/workspaces/${ws.workspaceId}/storage/import`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${ws.apiKey}`,
          'content-type': `multipart/form-data; boundary=${boundary}`,
        },
        body: multipartStream(boundary, 'huge.bin'),
        duplex: 'half',
      } as RequestInit);
    } finally {
      clearInterval(sampler);
    }
    peak = Math.max(peak, process.memoryUsage().rss);
    expect(res.status).toBe(201);
    const body = (await res.json()) as { imported: number; fileIds: string[] };
    expect(body.imported).toBe(1);
    const list = await ts.api(`/workspaces/${ws.workspaceId}/storage?search=huge.bin`, { key: ws.apiKey });
    const { files } = (await list.json()) as { files: { sizeBytes: number; path: string }[] };
    expect(files[0]).toMatchObject({ sizeBytes: SIZE, path: '/big/huge.bin' });
    const growthMb = (peak - before) / MB;
    expect(growthMb, `peak RSS growth ${growthMb.toFixed(1)} MB`).toBeLessThan(100);
  }, 180_000);
});
