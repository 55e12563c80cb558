import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import S3rver from 's3rver';
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
import { buildPdf } from './documents.fixture.js';

/**
 * Document question answering with the S3 object store (s3rver on loopback): upload streams
 * into the bucket and is read back from it for indexing, a storage file in the bucket is
 * indexed in the background, deleting removes the objects.
 */

let s3: S3rver;
let dir: string;
let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let session: TestSession;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 's3rver-rag-'));
  s3 = new S3rver({
    address: '127.0.0.1',
    port: 0,
    silent: true,
    directory: dir,
    configureBuckets: [{ name: 'ai-suite' }],
  });
  const addr = await s3.run();
  ts = await startTestServerWithFakeModel({
    env: {
      S3_BUCKET: 'ai-suite',
      S3_ENDPOINT: `http://127.0.0.1:${addr.port}`,
      S3_REGION: 'us-east-1',
      S3_ACCESS_KEY_ID: 'S3RVER',
      S3_SECRET_ACCESS_KEY: 'S3RVER',
      S3_FORCE_PATH_STYLE: 'true',
      RUN_POLL_INTERVAL_MS: '50',
    },
  });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  session = await createTestSession(ts, ws);
}, 60_000);

afterAll(async () => {
  await ts?.close();
  await s3?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const em = () => ts.server.deps.em();

async function storageKey(fileId: string): Promise<string> {
  const rows = await em().execute<{ storage_key: string }[]>(
    'select storage_key from storage_files where id = ?',
    [fileId],
  );
  return rows[0]?.storage_key as string;
}

async function waitFor<T>(fn: () => Promise<T | undefined | false>, what: string): Promise<T> {
  for (let i = 0; i < 2400; i++) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('RAG on the S3 object store', () => {
  let pdfDoc: { documentId: string; fileId: string };

  it('uploads into the bucket, indexes from it, answers with page sources', async () => {
    expect(ts.server.deps.objects.kind).toBe('s3');
    const pdf = await buildPdf([
      'The ferry timetable is printed on the next page.',
      'The ferry to the island leaves at seven in the morning from pier four.',
    ]);
    const fd = new FormData();
    fd.append('workspace_id', ws.workspaceId);
    fd.append('files[]', new Blob([new Uint8Array(pdf)], { type: 'application/pdf' }), 'ferry.pdf');
    fd.append(
      'files[]',
      new Blob(['The harbour cafe sells smoked fish on Fridays.'], { type: 'text/plain' }),
      'cafe.txt',
    );
    const res = await ts.api('/rag/upload', { method: 'POST', key: session.token, body: fd });
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      results: { successful: number; details: { filename: string; documentId: string; chunks: number }[] };
    };
    expect(body.results.successful).toBe(2);
    expect(body.results.details.map((d) => [d.filename, d.chunks])).toEqual([
      ['ferry.pdf', 2],
      ['cafe.txt', 1],
    ]);

    const docs = (await (
      await ts.api(`/rag/documents?workspace_id=${ws.workspaceId}`, { key: session.token })
    ).json()) as { documents: { id: string; name: string; storageFileId: string; status: string }[] };
    const ferry = docs.documents.find((d) => d.name === 'ferry.pdf');
    expect(ferry?.status).toBe('ready');
    pdfDoc = { documentId: ferry?.id as string, fileId: ferry?.storageFileId as string };
    // The bytes are in the bucket, whole.
    const head = await ts.server.deps.objects.head(await storageKey(pdfDoc.fileId));
    expect(head?.size).toBe(pdf.length);

    const q = await ts.api('/rag/query', {
      method: 'POST',
      key: session.token,
      json: { query: 'When does the ferry to the island leave?', workspace_id: ws.workspaceId },
    });
    expect(q.status).toBe(200);
    const answer = (await q.json()) as { result: { sources: { document: string; page: number }[] } };
    expect(answer.result.sources[0]).toMatchObject({ document: 'ferry.pdf', page: 2 });

    // Re-indexing reads the object back from the bucket.
    const re = await ts.api(`/rag/documents/${pdfDoc.documentId}/reindex`, {
      method: 'POST',
      key: session.token,
      json: { workspace_id: ws.workspaceId },
    });
    expect(re.status).toBe(200);
    expect(await re.json()).toMatchObject({ status: 'ready', chunks: 2 });
  });

  it('indexes a storage file held in the bucket in the background', async () => {
    const fd = new FormData();
    fd.append('kind', 'files');
    fd.append(
      'file[]',
      new Blob(['name,berth\nSea Lark,12\nMorning Star,7\n'], { type: 'text/csv' }),
      'boats.csv',
    );
    const imp = await ts.api(`/workspaces/${ws.workspaceId}/storage/import`, {
      method: 'POST',
      key: ws.apiKey,
      body: fd,
    });
    expect(imp.status).toBe(201);
    const fileId = ((await imp.json()) as { fileIds: string[] }).fileIds[0] as string;
    const res = await ts.api(`/workspaces/${ws.workspaceId}/storage/files/${fileId}/index`, {
      method: 'POST',
      key: ws.apiKey,
      json: {},
    });
    expect(res.status).toBe(202);
    const { documentId } = (await res.json()) as { documentId: string };
    const status = await waitFor(async () => {
      const rows = await em().execute<{ index_status: string }[]>(
        'select index_status from storage_files where id = ?',
        [fileId],
      );
      const s = rows[0]?.index_status;
      return (s === 'ready' || s === 'failed') && s;
    }, 'indexed');
    expect(status).toBe('ready');
    const chunks = await em().execute<{ content: string }[]>(
      'select content from rag_chunks where document_id = ?',
      [documentId],
    );
    expect(chunks.map((c) => c.content).join('\n')).toContain('name: Morning Star; berth: 7');

    // Deleting the storage file removes the document, its chunks and the object.
    const key = await storageKey(fileId);
    const del = await ts.api(`/workspaces/${ws.workspaceId}/storage/files/${fileId}`, {
      method: 'DELETE',
      key: ws.apiKey,
    });
    expect(del.status).toBe(200);
    expect(await em().execute('select 1 from rag_documents where id = ?', [documentId])).toHaveLength(0);
    expect(await em().execute('select 1 from rag_chunks where document_id = ?', [documentId])).toHaveLength(
      0,
    );
    expect(await ts.server.deps.objects.head(key)).toBeNull();
  });

  it('deleting an uploaded document removes its chunks, its file and its object from the bucket', async () => {
    const key = await storageKey(pdfDoc.fileId);
    const res = await ts.api(`/rag/documents/${pdfDoc.documentId}?workspace_id=${ws.workspaceId}`, {
      method: 'DELETE',
      key: session.token,
    });
    expect(res.status).toBe(200);
    expect(
      await em().execute('select 1 from rag_chunks where document_id = ?', [pdfDoc.documentId]),
    ).toHaveLength(0);
    expect(await em().execute('select 1 from storage_files where id = ?', [pdfDoc.fileId])).toHaveLength(0);
    expect(await ts.server.deps.objects.head(key)).toBeNull();
  });
});
