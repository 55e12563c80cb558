import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WORKER_LOST_ERROR } from '../../runs/index.js';
import {
  createTestDatabase,
  createTestWorkspace,
  type FakeOpenAI,
  fakeOpenAIEnv,
  startFakeOpenAI,
  startTestServer,
  type TestDatabase,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { EMBED_BATCH } from './ingest.js';

const SHUTDOWN_ERROR = 'Server shut down during the run';

/**
 * A storage file's indexing survives a restart: the server stops while the second batch of
 * embeddings is in flight, the run is handed back, and the next server continues from the
 * checkpoint (the first batch is not embedded again) to `ready`. A run whose attempts are
 * spent when its server stops ends `failed`, and so does the file.
 */

let fake: FakeOpenAI;
let db: TestDatabase;
let dataDir: string;
let ws: TestWorkspace;
const servers: TestServer[] = [];

const env = () => ({
  ...fakeOpenAIEnv(fake),
  // Both servers read the same local object store.
  DATA_DIR: dataDir,
  RUN_POLL_INTERVAL_MS: '50',
  RUN_LEASE_MS: '20000',
});

async function start(): Promise<TestServer> {
  const ts = await startTestServer({ db, env: env() });
  servers.push(ts);
  return ts;
}

beforeAll(async () => {
  fake = await startFakeOpenAI();
  db = await createTestDatabase();
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-rag-restart-'));
}, 60_000);

afterAll(async () => {
  for (const s of servers.splice(0)) await s.close().catch(() => undefined);
  await db?.drop();
  await fake?.close();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

async function waitFor<T>(fn: () => Promise<T | undefined | false>, what: string): Promise<T> {
  for (let i = 0; i < 2400; i++) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const embeddingRequests = () => fake.requests.filter((r) => r.path.endsWith('/embeddings'));

/** ~200 chunks of numbered sentences: four batches of embeddings. */
const SENTENCES = 2400;
const logText = () =>
  Array.from(
    { length: SENTENCES },
    (_, i) => `Entry ${i} of the lighthouse log records calm seas and a westerly wind near the harbour.`,
  ).join(' ');

async function importText(ts: TestServer, name: string, text: string): Promise<string> {
  const fd = new FormData();
  fd.append('kind', 'files');
  fd.append('file[]', new Blob([text], { type: 'text/plain' }), name);
  const res = await ts.api(`/workspaces/${ws.workspaceId}/storage/import`, {
    method: 'POST',
    key: ws.apiKey,
    body: fd,
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { fileIds: string[] }).fileIds[0] as string;
}

async function requestIndex(ts: TestServer, fileId: string) {
  const res = await ts.api(`/workspaces/${ws.workspaceId}/storage/files/${fileId}/index`, {
    method: 'POST',
    key: ws.apiKey,
    json: {},
  });
  expect(res.status).toBe(202);
  return (await res.json()) as { documentId: string; runId: string; file: { indexStatus: string } };
}

describe('background indexing across a restart', { timeout: 240_000 }, () => {
  it('continues from its checkpoint on the next server and ends ready, every chunk once', async () => {
    const first = await start();
    ws = await createTestWorkspace(first, { creditsUsd: '10' });
    const em = () => first.server.deps.em();
    const fileId = await importText(first, 'log.txt', logText());

    // The first batch is embedded; the second never answers while the first server runs.
    fake.scriptEmbeddings({}, { hang: true });
    const { documentId, runId } = await requestIndex(first, fileId);
    await waitFor(async () => {
      if (embeddingRequests().length >= 2) return true;
      const rows = await em().execute<{ status: string; error: string | null; chunk_count: number }[]>(
        'select status, error, chunk_count from rag_documents where id = ?',
        [documentId],
      );
      // Diagnostics: the run must still be in its first batches here.
      if (rows[0]?.status === 'failed' || rows[0]?.status === 'ready') {
        throw new Error(`indexing ended early: ${JSON.stringify(rows[0])}`);
      }
      return false;
    }, 'the second batch in flight');
    expect(embeddingRequests()).toHaveLength(2);
    const mid = await em().execute<{ index_status: string }[]>(
      'select index_status from storage_files where id = ?',
      [fileId],
    );
    expect(mid[0]?.index_status).toBe('processing');
    const stored = await em().execute('select 1 from rag_chunks where document_id = ?', [documentId]);
    expect(stored).toHaveLength(EMBED_BATCH);
    // Asking again while it runs answers with the same run.
    expect((await requestIndex(first, fileId)).runId).toBe(runId);

    await first.close();
    servers.splice(servers.indexOf(first), 1);
    const second = await start();
    const em2 = () => second.server.deps.em();
    const before = embeddingRequests().length;
    const done = await waitFor(async () => {
      const rows = await em2().execute<{ index_status: string; is_indexed: boolean }[]>(
        'select index_status, is_indexed from storage_files where id = ?',
        [fileId],
      );
      const r = rows[0];
      return (r?.index_status === 'ready' || r?.index_status === 'failed') && r;
    }, 'indexed after the restart');
    expect(done).toEqual({ index_status: 'ready', is_indexed: true });

    // The file is ready a moment before the engine records the run's end.
    const run = await waitFor(async () => {
      const rows = await em2().execute<{ status: string; attempts: number; kind: string }[]>(
        'select status, attempts, kind from runs where id = ?',
        [runId],
      );
      return rows[0]?.status !== 'running' && rows[0];
    }, 'the run ended');
    expect(run).toEqual({ status: 'completed', attempts: 2, kind: 'rag_index' });

    // Every sentence once, in order, across contiguous chunks.
    const chunks = await em2().execute<{ chunk_index: number; content: string }[]>(
      'select chunk_index, content from rag_chunks where document_id = ? order by chunk_index',
      [documentId],
    );
    expect(chunks.map((c) => Number(c.chunk_index))).toEqual(chunks.map((_, i) => i));
    const entries = [
      ...chunks
        .map((c) => c.content)
        .join(' ')
        .matchAll(/Entry (\d+) of/g),
    ].map((m) => Number(m[1]));
    expect(entries).toEqual(Array.from({ length: SENTENCES }, (_, i) => i));
    expect(chunks.length).toBeGreaterThan(2 * EMBED_BATCH);
    const doc = (
      await em2().execute<{ status: string; chunk_count: number }[]>(
        'select status, chunk_count from rag_documents where id = ?',
        [documentId],
      )
    )[0];
    expect(doc).toEqual({ status: 'ready', chunk_count: chunks.length });

    // The second server embedded only what the first had not stored: batches 2 onwards.
    const after = embeddingRequests().slice(before);
    const embedded = after.reduce((n, r) => n + (r.body.input as string[]).length, 0);
    expect(embedded).toBe(chunks.length - EMBED_BATCH);
    expect(after[0]?.body.input?.[0]).toBe(chunks[EMBED_BATCH]?.content);
  });

  it('a run whose attempts are spent when its server stops fails, and so does the file', async () => {
    const server = servers[0] as TestServer;
    const em = () => server.server.deps.em();
    const fileId = await importText(server, 'second-log.txt', logText());
    fake.scriptEmbeddings({ hang: true });
    const before = embeddingRequests().length;
    const { documentId, runId } = await requestIndex(server, fileId);
    await waitFor(async () => embeddingRequests().length === before + 1, 'the first batch in flight');
    await em().execute('update runs set max_attempts = 1 where id = ?', [runId]);
    await server.close();
    servers.splice(0, 1);

    const next = await start();
    const em2 = () => next.server.deps.em();
    // Failed by the stopping server (its shutdown), or, had the stop outlasted its grace, by
    // the next one once the lease expired.
    const file = await waitFor(async () => {
      const rows = await em2().execute<{ index_status: string; is_indexed: boolean }[]>(
        'select index_status, is_indexed from storage_files where id = ?',
        [fileId],
      );
      return rows[0]?.index_status === 'failed' && rows[0];
    }, 'the file failed');
    expect(file).toEqual({ index_status: 'failed', is_indexed: false });
    const doc = (
      await em2().execute<{ status: string; error: string }[]>(
        'select status, error from rag_documents where id = ?',
        [documentId],
      )
    )[0];
    expect(doc?.status).toBe('failed');
    expect([SHUTDOWN_ERROR, WORKER_LOST_ERROR]).toContain(doc?.error);
    expect(await em2().execute('select 1 from rag_chunks where document_id = ?', [documentId])).toHaveLength(
      0,
    );
    const run = await waitFor(async () => {
      const rows = await em2().execute<{ status: string }[]>('select status from runs where id = ?', [runId]);
      return rows[0]?.status !== 'running' && rows[0];
    }, 'the run ended');
    expect(run.status).toBe('failed');
  });
});
