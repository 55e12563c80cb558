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
import type { StorageFileDto } from '../storage/schema.js';

/**
 * Storage files indexed in the background on the run engine (docs/rag.md, "Storage files"):
 * `indexStatus` none → queued → processing → ready | failed, who may ask, what deleting and
 * replacing do. Restarts are in indexing-restart.test.ts.
 */

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let session: TestSession;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RUN_POLL_INTERVAL_MS: '50' } });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  session = await createTestSession(ts, ws);
}, 60_000);
afterAll(async () => {
  await ts?.close();
});

const em = () => ts.server.deps.em();
const base = () => `/workspaces/${ws.workspaceId}/storage`;

async function importFile(path: string, body: string | Buffer, type = ''): Promise<string> {
  const fd = new FormData();
  fd.append('kind', 'files');
  fd.append(
    'file[]',
    new Blob([typeof body === 'string' ? body : new Uint8Array(body)], { type }),
    path.replace(/^\//, ''),
  );
  const res = await ts.api(`${base()}/import`, { method: 'POST', key: ws.apiKey, body: fd });
  expect(res.status).toBe(201);
  return ((await res.json()) as { fileIds: string[] }).fileIds[0] as string;
}

const requestIndex = (fileId: string, token: string = ws.apiKey, workspaceId = ws.workspaceId) =>
  ts.api(`/workspaces/${workspaceId}/storage/files/${fileId}/index`, {
    method: 'POST',
    key: token,
    json: {},
  });

async function fileRow(fileId: string): Promise<{ index_status: string; is_indexed: boolean } | undefined> {
  const rows = await em().execute<{ index_status: string; is_indexed: boolean }[]>(
    'select index_status, is_indexed from storage_files where id = ?',
    [fileId],
  );
  return rows[0];
}

async function waitFor<T>(fn: () => Promise<T | undefined | false>, what: string): Promise<T> {
  for (let i = 0; i < 2400; i++) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const settled = (fileId: string) =>
  waitFor(async () => {
    const r = await fileRow(fileId);
    return (r?.index_status === 'ready' || r?.index_status === 'failed') && r;
  }, `file ${fileId} indexed`);

async function listed(fileId: string): Promise<StorageFileDto | undefined> {
  const res = await ts.api(`${base()}?type=all&limit=200`, { key: ws.apiKey });
  return ((await res.json()) as { files: StorageFileDto[] }).files.find((f) => f.id === fileId);
}

async function documents(token = session.token) {
  const res = await ts.api(`/rag/documents?workspace_id=${ws.workspaceId}`, { key: token });
  expect(res.status).toBe(200);
  return ((await res.json()) as { documents: Record<string, any>[] }).documents;
}

/** The run's row once it has ended (the file's status changes a moment before the run's). */
async function endedRun(runId: string) {
  return waitFor(async () => {
    const rows = await em().execute<
      { kind: string; status: string; attempts: number; error: string | null }[]
    >('select kind, status, attempts, error from runs where id = ?', [runId]);
    return rows[0] && rows[0].status !== 'pending' && rows[0].status !== 'running' && rows[0];
  }, `run ${runId} ended`);
}

async function runEvents(runId: string): Promise<string[]> {
  const rows = await em().execute<{ type: string }[]>(
    'select type from run_events where run_id = ? order by seq',
    [runId],
  );
  return rows.map((r) => r.type);
}

describe('indexing a storage file in the background', () => {
  let handbookId: string;
  let handbookDoc: string;

  it('API key: 202 queued at once, then processing → ready on the run engine; a session finds it', async () => {
    handbookId = await importFile(
      '/manuals/handbook.md',
      '# Handbook\n\nThe lighthouse keeper winds the clock every Tuesday at dawn.\n\nVisitors sign the red book.\n',
    );
    expect(await listed(handbookId)).toMatchObject({ isIndexed: false, indexStatus: 'none' });

    const res = await requestIndex(handbookId);
    expect(res.status).toBe(202);
    const body = (await res.json()) as { file: StorageFileDto; documentId: string; runId: string };
    expect(body.file).toMatchObject({ id: handbookId, path: '/manuals/handbook.md', isIndexed: false });
    // Queued when answered (the worker may already have taken it by the time it is read).
    expect(['queued', 'processing', 'ready']).toContain(body.file.indexStatus);
    handbookDoc = body.documentId;

    expect(await settled(handbookId)).toEqual({ index_status: 'ready', is_indexed: true });
    expect(await listed(handbookId)).toMatchObject({ isIndexed: true, indexStatus: 'ready' });
    const run = await endedRun(body.runId);
    expect(run).toMatchObject({ kind: 'rag_index', status: 'completed', attempts: 1 });
    expect(await runEvents(body.runId)).toEqual([
      'run.started',
      'index.processing',
      'index.progress',
      'run.completed',
    ]);

    // The document of the index, and a question answered from it.
    const doc = (await documents()).find((d) => d.id === handbookDoc);
    expect(doc).toMatchObject({
      name: 'handbook.md',
      status: 'ready',
      chunks: 1,
      storageFileId: handbookId,
      origin: 'storage',
      error: null,
    });
    const q = await ts.api('/rag/query', {
      method: 'POST',
      key: session.token,
      json: { query: 'When does the lighthouse keeper wind the clock?', workspace_id: ws.workspaceId },
    });
    expect(q.status).toBe(200);
    const answer = (await q.json()) as { result: { sources: { document: string; content: string }[] } };
    expect(answer.result.sources[0]?.document).toBe('handbook.md');
    expect(answer.result.sources[0]?.content).toContain('every Tuesday at dawn');
    // The embeddings were metered under the indexing endpoint, with the run and the key.
    const usage = await em().execute<{ n: string }[]>(
      'select count(*) as n from usage_records where run_id = ? and endpoint = ? and api_key_id = ?',
      [body.runId, '/workspaces/{workspaceId}/storage/files/{fileId}/index', ws.keyId],
    );
    expect(Number(usage[0]?.n)).toBe(1);
  });

  it('a session may ask too; asking again indexes the file again', async () => {
    const res = await requestIndex(handbookId, session.token);
    expect(res.status).toBe(202);
    const body = (await res.json()) as { documentId: string; runId: string };
    expect(body.documentId).toBe(handbookDoc);
    expect(await settled(handbookId)).toEqual({ index_status: 'ready', is_indexed: true });
    const chunks = await em().execute('select 1 from rag_chunks where document_id = ?', [handbookDoc]);
    expect(chunks).toHaveLength(1);
  });

  it('a file that cannot be read ends failed with the reason', async () => {
    const id = await importFile('/data/broken.json', '{"a": ');
    const res = await requestIndex(id);
    expect(res.status).toBe(202);
    const { documentId, runId } = (await res.json()) as { documentId: string; runId: string };
    expect(await settled(id)).toEqual({ index_status: 'failed', is_indexed: false });
    const doc = (await documents()).find((d) => d.id === documentId);
    expect(doc?.status).toBe('failed');
    expect(doc?.error).toMatch(/^Invalid JSON/);
    const run = await endedRun(runId);
    expect(run?.status).toBe('failed');
    expect(run?.error).toBe(doc?.error);
  });

  it('refuses what cannot be indexed, before queueing anything', async () => {
    const png = await importFile('/img/logo.png', Buffer.from([0x89, 0x50, 0x4e, 0x47]), 'image/png');
    let res = await requestIndex(png);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: 'File type image/png not supported for logo.png',
      code: 'UNSUPPORTED_FILE_TYPE',
    });
    expect(await fileRow(png)).toEqual({ index_status: 'none', is_indexed: false });

    // A file over 100 MB (its recorded size) is refused with the upload's message.
    const big = await importFile('/big/huge.txt', 'small really');
    await em().execute('update storage_files set size_bytes = ? where id = ?', [100 * 1024 * 1024 + 1, big]);
    res = await requestIndex(big);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: 'File huge.txt exceeds maximum size of 100MB',
      code: 'FILE_TOO_LARGE',
    });

    res = await requestIndex('00000000-0000-4000-8000-000000000000');
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: 'File not found' });
    res = await requestIndex('not-a-uuid');
    expect(res.status).toBe(404);

    // Another workspace's path: 401 like every storage endpoint; no credentials: 401.
    const other = await createTestWorkspace(ts);
    res = await requestIndex(handbookId, other.apiKey);
    expect(res.status).toBe(401);
    res = await requestIndex(handbookId, ws.apiKey, other.workspaceId);
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ error: 'Unauthorized' });
    res = await ts.api(`${base()}/files/${handbookId}/index`, { method: 'POST', json: {} });
    expect(res.status).toBe(401);
  });

  it('deleting the document keeps the storage file (back to none); deleting the file removes the document', async () => {
    const del = await ts.api(`/rag/documents/${handbookDoc}?workspace_id=${ws.workspaceId}`, {
      method: 'DELETE',
      key: session.token,
    });
    expect(del.status).toBe(200);
    expect(await listed(handbookId)).toMatchObject({ isIndexed: false, indexStatus: 'none' });
    expect(await em().execute('select 1 from rag_chunks where document_id = ?', [handbookDoc])).toHaveLength(
      0,
    );
    const content = await ts.api(`${base()}/content?fileId=${handbookId}&fileType=file`, { key: ws.apiKey });
    expect(content.status).toBe(200);

    // Indexed again, then the storage file deleted: document and chunks go with it.
    const res = await requestIndex(handbookId);
    const { documentId } = (await res.json()) as { documentId: string };
    expect(await settled(handbookId)).toEqual({ index_status: 'ready', is_indexed: true });
    const gone = await ts.api(`${base()}/files/${handbookId}`, { method: 'DELETE', key: ws.apiKey });
    expect(gone.status).toBe(200);
    expect(await em().execute('select 1 from rag_documents where id = ?', [documentId])).toHaveLength(0);
    expect(await em().execute('select 1 from rag_chunks where document_id = ?', [documentId])).toHaveLength(
      0,
    );
  });

  it('replacing the file’s content (re-import) drops its index: status none until indexed again', async () => {
    const id = await importFile('/notes/tide.txt', 'High tide comes at noon on Sundays.');
    let res = await requestIndex(id);
    const first = (await res.json()) as { documentId: string };
    expect(await settled(id)).toEqual({ index_status: 'ready', is_indexed: true });
    const again = await importFile('/notes/tide.txt', 'Low tide comes at midnight on Mondays.');
    expect(again).toBe(id);
    expect(await fileRow(id)).toEqual({ index_status: 'none', is_indexed: false });
    expect(
      await em().execute('select 1 from rag_chunks where document_id = ?', [first.documentId]),
    ).toHaveLength(0);
    res = await requestIndex(id);
    const second = (await res.json()) as { documentId: string };
    expect(await settled(id)).toEqual({ index_status: 'ready', is_indexed: true });
    const rows = await em().execute<{ content: string }[]>(
      'select content from rag_chunks where document_id = ?',
      [second.documentId],
    );
    expect(rows.map((r) => r.content)).toEqual(['Low tide comes at midnight on Mondays.']);
  });
});
