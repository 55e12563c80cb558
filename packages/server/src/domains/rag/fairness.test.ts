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

/**
 * One workspace never slows another's documents (docs/rag.md, "Fairness"), on the database
 * the run is given (PGlite, or the PostgreSQL server with DATABASE_URL): workspace A sends
 * several large documents, B one small one after them; with one extraction worker, B's is
 * extracted after at most one of A's, so it is ready before A's later ones. Order, not time.
 */

let ts: TestServer & { fake: FakeOpenAI };
let a: TestWorkspace;
let b: TestWorkspace;
let sa: TestSession;
let sb: TestSession;
const warnings: Error[] = [];
const onWarning = (w: Error) => warnings.push(w);

beforeAll(async () => {
  process.on('warning', onWarning);
  ts = await startTestServerWithFakeModel({
    env: {
      DOCUMENT_WORKERS: '1',
      // Every indexing run of the test reaches the pool at once (the engine claims oldest first).
      RUN_WORKER_CONCURRENCY: '8',
    },
  });
  a = await createTestWorkspace(ts, { creditsUsd: '10' });
  b = await createTestWorkspace(ts, { creditsUsd: '10' });
  sa = await createTestSession(ts, a);
  sb = await createTestSession(ts, b);
}, 180_000);
afterAll(async () => {
  process.off('warning', onWarning);
  await ts?.close();
});

/** About 1.4 MB of prose: some 1,400 chunks, 22 embedding batches. */
const large = (tag: string) =>
  Buffer.from(
    Array.from({ length: 40_000 }, (_, i) => `Harbour log ${tag} line ${i} records the tide.`).join(' '),
  );
const small = Buffer.from('# Tides\n\nThe tide turns at six. The boats go out at seven.\n');

function upload(session: TestSession, name: string, body: Buffer) {
  const fd = new FormData();
  fd.append('workspace_id', session.workspaceId);
  fd.append('files[]', new Blob([new Uint8Array(body)]), name);
  return ts.api('/rag/upload', { method: 'POST', key: session.token, body: fd });
}

async function importFile(ws: TestWorkspace, name: string, body: Buffer): Promise<string> {
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

async function index(ws: TestWorkspace, fileId: string): Promise<string> {
  const res = await ts.api(`/workspaces/${ws.workspaceId}/storage/files/${fileId}/index`, {
    method: 'POST',
    key: ws.apiKey,
    json: {},
  });
  expect(res.status).toBe(202);
  return ((await res.json()) as { documentId: string }).documentId;
}

describe('fair turns at the document pool', () => {
  it('uploads: B’s small document completes before A’s later large ones', async () => {
    const order: string[] = [];
    const sent = [1, 2, 3, 4].map((i) =>
      upload(sa, `log-${i}.txt`, large(`a${i}`)).then(async (res) => {
        expect(res.status).toBe(200);
        order.push(`a${i}`);
      }),
    );
    sent.push(
      upload(sb, 'tides.md', small).then(async (res) => {
        expect(res.status).toBe(200);
        const body = (await res.json()) as { results: { successful: number } };
        expect(body.results.successful).toBe(1);
        order.push('b');
      }),
    );
    await Promise.all(sent);
    expect(order.indexOf('b')).toBeLessThanOrEqual(1);
  }, 600_000);

  it('background indexing: the same, and a long document leaves no listeners on its run’s signal', async () => {
    const docs: { name: string; id: string }[] = [];
    const files = await Promise.all([1, 2, 3, 4].map((i) => importFile(a, `bg-${i}.txt`, large(`bg${i}`))));
    const tides = await importFile(b, 'tides.md', small);
    for (const [i, f] of files.entries()) docs.push({ name: `a${i + 1}`, id: await index(a, f) });
    docs.push({ name: 'b', id: await index(b, tides) });
    const em = ts.server.deps.em();
    await expect
      .poll(
        async () => {
          const rows = await em.execute<{ n: string }[]>(
            `select count(*) as n from rag_documents where id in (${docs.map(() => '?').join(',')}) and status in ('ready', 'failed')`,
            docs.map((d) => d.id),
          );
          return Number(rows[0]?.n);
        },
        { timeout: 600_000, interval: 250 },
      )
      .toBe(docs.length);
    const rows = await em.execute<{ id: string; status: string }[]>(
      `select id, status from rag_documents where id in (${docs.map(() => '?').join(',')}) order by updated_at, id`,
      docs.map((d) => d.id),
    );
    expect(rows.every((r) => r.status === 'ready')).toBe(true);
    const order = rows.map((r) => docs.find((d) => d.id === r.id)?.name);
    expect(order.indexOf('b')).toBeLessThanOrEqual(1);
    // Each run embedded 22 batches under one signal: the embedding calls' listeners went with them.
    expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
  }, 900_000);
});
