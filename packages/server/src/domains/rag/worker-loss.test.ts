import { manyPagesPdf } from '@ai-suite/testkit';
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
import { documentPool } from './document-pool.js';

/**
 * A document pool worker killed in the middle of a storage file's indexing (a run of the run
 * engine): the document fails with the reason, the pool starts a new worker, the next file
 * indexes, and the server's other requests never stopped.
 */

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let session: TestSession;
beforeAll(async () => {
  // Pages bound lifted: the 100,000-page PDF keeps its worker busy until it is killed.
  ts = await startTestServerWithFakeModel({ env: { DOCUMENT_MAX_PDF_PAGES: '1000000' } });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  session = await createTestSession(ts, ws);
}, 120_000);
afterAll(() => ts?.close());

async function importFile(name: string, body: Buffer): Promise<string> {
  const fd = new FormData();
  fd.append('kind', 'files');
  fd.append('file[]', new Blob([new Uint8Array(body)]), name);
  const res = await ts.api(`/workspaces/${ws.workspaceId}/storage/import`, {
    method: 'POST',
    key: ws.apiKey,
    body: fd,
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { fileIds: string[] }).fileIds[0] as string;
}

async function index(fileId: string): Promise<string> {
  const res = await ts.api(`/workspaces/${ws.workspaceId}/storage/files/${fileId}/index`, {
    method: 'POST',
    key: ws.apiKey,
    json: {},
  });
  expect(res.status).toBe(202);
  return ((await res.json()) as { documentId: string }).documentId;
}

async function documentState(documentId: string) {
  const res = await ts.api(`/rag/documents?workspace_id=${ws.workspaceId}`, { key: session.token });
  const { documents } = (await res.json()) as {
    documents: { id: string; status: string; error: string | null; chunks: number }[];
  };
  return documents.find((d) => d.id === documentId);
}

describe('a document worker lost mid-job', () => {
  it('fails that document, and the next one indexes on a new worker', async () => {
    const pool = documentPool(ts.server.deps);
    const big = await index(await importFile('pages.pdf', manyPagesPdf(100_000)));
    await expect
      .poll(async () => (await documentState(big))?.status, { timeout: 120_000, interval: 100 })
      .toBe('processing');
    // A worker has started the job (a worker killed while it still starts leaves piscina's
    // queue waiting for the next job: decision 0040).
    await expect.poll(() => pool.active, { timeout: 120_000, interval: 50 }).toBe(1);
    await new Promise((r) => setTimeout(r, 500));
    const [worker] = pool.threads;
    await worker?.terminate();
    await expect
      .poll(async () => (await documentState(big))?.status, { timeout: 120_000, interval: 100 })
      .toBe('failed');
    expect(await documentState(big)).toMatchObject({
      error: 'The worker extracting the document stopped before the end',
      chunks: 0,
    });
    // The server went on serving meanwhile.
    expect((await fetch(`${ts.url}/healthz`)).status).toBe(200);

    const small = await index(
      await importFile(
        'notes.md',
        Buffer.from('# Tides\n\nThe tide turns at six. The boats go out at seven.\n'),
      ),
    );
    await expect
      .poll(async () => (await documentState(small))?.status, { timeout: 120_000, interval: 100 })
      .toBe('ready');
    expect(pool.threads).toHaveLength(1);
    expect(pool.threads[0]).not.toBe(worker);
  }, 300_000);
});
