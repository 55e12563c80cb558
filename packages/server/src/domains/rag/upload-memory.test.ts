import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestSession,
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestSession,
  type TestWorkspace,
} from '../../test/harness.js';

const MB = 1024 * 1024;
// RAG_MEMORY_TEST_MB: a smaller size while debugging.
const SIZE = Number(process.env.RAG_MEMORY_TEST_MB ?? 100) * MB;
const SPACES = Buffer.alloc(MB, 0x20);
let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let session: TestSession;
beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  session = await createTestSession(ts, ws);
}, 180_000);
afterAll(() => ts?.close());

/**
 * A multipart upload generated on the fly: `size` bytes of text, one sentence per megabyte
 * padded with spaces (so it is cheap to index but every byte is read), never in memory at once.
 */
function multipartStream(boundary: string, workspaceId: string, filename: string, size: number) {
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="workspace_id"\r\n\r\n${workspaceId}\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="files[]"; filename="${filename}"\r\n` +
      'Content-Type: text/plain\r\n\r\n',
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  let sent = 0;
  let stage = 0;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (stage === 0) {
        controller.enqueue(new Uint8Array(head));
        stage = 1;
      } else if (stage === 1) {
        // A short sentence, then spaces from one shared buffer up to the next megabyte.
        const n = Math.min(MB, size - sent);
        const sentence = Buffer.from(`Lighthouse log entry ${sent / MB} records calm seas. `).subarray(0, n);
        controller.enqueue(new Uint8Array(sentence));
        if (n > sentence.length)
          controller.enqueue(new Uint8Array(SPACES.buffer, SPACES.byteOffset, n - sentence.length));
        sent += n;
        if (sent >= size) stage = 2;
      } else {
        controller.enqueue(new Uint8Array(tail));
        controller.close();
      }
    },
  });
}

async function send(size: number, filename: string) {
  const boundary = `----aisuite${Date.now()}`;
  return fetch(`${ts.url}/api/v1/rag/upload`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${session.token}`,
      'content-type': `multipart/form-data; boundary=${boundary}`,
    },
    body: multipartStream(boundary, ws.workspaceId, filename, size),
    duplex: 'half',
  } as RequestInit);
}

describe('streamed RAG upload', () => {
  it('stores and indexes a 100 MB file with bounded memory (peak RSS growth < 100 MB)', async () => {
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 5);
    let res: Response;
    try {
      res = await send(SIZE, 'log.txt');
    } finally {
      clearInterval(sampler);
    }
    peak = Math.max(peak, process.memoryUsage().rss);
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.results).toMatchObject({ successful: 1, failed: 0 });
    expect(body.results.details[0].chunks).toBeGreaterThan(3);
    const list = await ts.api(`/workspaces/${ws.workspaceId}/storage?type=documents`, { key: session.token });
    const { files } = (await list.json()) as { files: { sizeBytes: number; indexStatus: string }[] };
    expect(files[0]).toMatchObject({ sizeBytes: SIZE, indexStatus: 'ready' });
    const growthMb = (peak - before) / MB;
    expect(growthMb, `peak RSS growth ${growthMb.toFixed(1)} MB`).toBeLessThan(100);
    // Indexed to the end: the last megabyte's sentence is in a chunk.
    const last = await ts.server.deps
      .em()
      .execute('select 1 from rag_chunks where workspace_id = ? and content like ?', [
        ws.workspaceId,
        `%Lighthouse log entry ${SIZE / MB - 1} records calm seas.%`,
      ]);
    expect(last).toHaveLength(1);
  }, 300_000);

  it('refuses a file over 100 MB: File <name> exceeds maximum size of 100MB', async () => {
    const res = await send(100 * MB + 1, 'big.txt');
    expect(res.status).toBe(400);
    expect((await res.json()).error).toBe('File big.txt exceeds maximum size of 100MB');
    const rows = await ts.server.deps.em().execute("select 1 from storage_files where filename = 'big.txt'");
    expect(rows).toHaveLength(0);
  }, 300_000);
});
