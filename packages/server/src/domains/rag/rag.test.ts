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
import { buildDocx, buildPdf } from './documents.fixture.js';
import { NOT_FOUND_ANSWER } from './query.js';
import { RagService } from './service.js';

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let session: TestSession;

/** A stand-in for a model that follows the prompt: cites the source holding a word of the question. */
function citingModel(body: { messages: { role: string; content: string }[] }) {
  const last = body.messages.at(-1)?.content ?? '';
  const question = (/Question: (.*)$/s.exec(last)?.[1] ?? '').toLowerCase();
  const sources = [...last.matchAll(/^\[(\d+)\] [^\n]*\n([\s\S]*?)(?=\n\n\[\d+\] |\n\nQuestion: )/gm)];
  const key = ['warranty', 'refund', 'revenue', 'widget'].find((w) => question.includes(w));
  const hit = key ? sources.find((s) => (s[2] ?? '').toLowerCase().includes(key)) : undefined;
  if (!hit) return { text: 'NOT_IN_DOCUMENTS' };
  return { text: `According to the documents, ${(hit[2] ?? '').split('. ')[0]} [${hit[1]}].` };
}

function form(
  workspaceId: string | undefined,
  files: { name: string; body: Buffer | string; type?: string }[],
) {
  const fd = new FormData();
  if (workspaceId !== undefined) fd.append('workspace_id', workspaceId);
  for (const f of files)
    fd.append(
      'files[]',
      new Blob([typeof f.body === 'string' ? f.body : new Uint8Array(f.body)], { type: f.type ?? '' }),
      f.name,
    );
  return fd;
}

const upload = (fd: FormData, token: string | null = session.token) =>
  ts.api('/rag/upload', { method: 'POST', key: token ?? undefined, body: fd });
const query = (json: unknown, token: string | null = session.token) =>
  ts.api('/rag/query', { method: 'POST', key: token ?? undefined, json });

async function chunkCount(documentId: string): Promise<number> {
  const rows = await ts.server.deps
    .em()
    .execute<{ n: string }[]>('select count(*) as n from rag_chunks where document_id = ?', [documentId]);
  return Number(rows[0]?.n);
}

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ fake: { defaultReply: citingModel } });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  session = await createTestSession(ts, ws);
}, 180_000);

afterAll(async () => {
  await ts?.close();
});

describe('RAG before the first upload', () => {
  it('403 RAG service not enabled for this workspace', async () => {
    const other = await createTestWorkspace(ts, { creditsUsd: '1' });
    const s = await createTestSession(ts, other);
    const res = await query({ query: 'anything', workspace_id: other.workspaceId }, s.token);
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({ error: 'RAG service not enabled for this workspace' });
  });
});

describe('upload and query', () => {
  let pdfId: string;

  it('indexes PDF, DOCX, CSV, JSON and Markdown; an unsupported type fails alone', async () => {
    const pdf = await buildPdf([
      'Welcome to the kettle manual. Fill the kettle with water before switching it on.',
      'The warranty of the blue kettle lasts seven years from the date of purchase.',
      'Descaling should be done every month in hard water areas.',
    ]);
    const docx = await buildDocx([
      { paragraph: 'Refund policy' },
      { paragraph: 'A refund is granted within thirty days when the receipt is shown.' },
      {
        table: [
          ['Quarter', 'Revenue'],
          ['Q1', '120 thousand'],
        ],
      },
    ]);
    const res = await upload(
      form(ws.workspaceId, [
        { name: 'manual.pdf', body: pdf, type: 'application/pdf' },
        { name: 'policy.docx', body: docx },
        { name: 'photo.png', body: Buffer.from([0x89, 0x50, 0x4e, 0x47]), type: 'image/png' },
        { name: 'stock.csv', body: 'sku,name,count\n1,Widget blue,4\n2,Widget red,9\n', type: 'text/csv' },
        { name: 'notes.md', body: '# Notes\n\nThe office cat is called Pixel.\n' },
        { name: 'broken.json', body: '{"a": ' },
      ]),
    );
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body).toMatchObject({
      status: 'success',
      workspace_id: ws.workspaceId,
      results: { successful: 4, failed: 2 },
    });
    const details = body.results.details as {
      filename: string;
      documentId: string;
      chunks: number;
      status: string;
      error?: string;
    }[];
    expect(details.map((d) => [d.filename, d.status])).toEqual([
      ['manual.pdf', 'completed'],
      ['policy.docx', 'completed'],
      ['photo.png', 'failed'],
      ['stock.csv', 'completed'],
      ['notes.md', 'completed'],
      ['broken.json', 'failed'],
    ]);
    expect(details[2]).toEqual({
      filename: 'photo.png',
      documentId: null,
      chunks: 0,
      status: 'failed',
      error: 'File type image/png not supported for photo.png',
    });
    expect(details[5]?.error).toMatch(/^Invalid JSON/);
    expect(details[0]?.chunks).toBe(3);
    pdfId = details[0]?.documentId as string;
    expect(await chunkCount(pdfId)).toBe(3);

    // The documents are storage files of type `document`, indexed.
    const list = await ts.api(`/workspaces/${ws.workspaceId}/storage?type=documents`, {
      key: session.token,
    });
    const files = (await list.json()).files as {
      filename: string;
      isIndexed: boolean;
      indexStatus: string;
    }[];
    expect(files.find((f) => f.filename === 'manual.pdf')).toMatchObject({
      isIndexed: true,
      indexStatus: 'ready',
    });
    expect(files.find((f) => f.filename === 'broken.json')).toMatchObject({
      isIndexed: false,
      indexStatus: 'failed',
    });
  });

  it('answers a question held only by page 2 of the PDF, citing page 2', async () => {
    const before = ts.fake.requests.length;
    const res = await query({
      query: 'How long does the warranty of the blue kettle last?',
      workspace_id: ws.workspaceId,
    });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.status).toBe('success');
    expect(body.result.sources[0]).toMatchObject({ document: 'manual.pdf', page: 2 });
    expect(body.result.sources[0].content).toContain('seven years');
    expect(body.result.answer).toBe(
      'According to the documents, The warranty of the blue kettle lasts seven years from the date of purchase. [1].',
    );
    expect(body.result.confidence).toBeGreaterThan(0.5);
    for (const s of body.result.sources) {
      expect(s.relevance_score).toBeGreaterThanOrEqual(0.7);
      expect(s.relevance_score).toBeLessThanOrEqual(1);
      expect(s.confidence).toBeGreaterThanOrEqual(0);
      expect(s.confidence).toBeLessThanOrEqual(1);
      expect(s.metadata).toMatchObject({ document_id: expect.any(String), mime_type: expect.any(String) });
    }
    expect(body.usage).toMatchObject({ input_tokens: expect.any(Number), output_tokens: expect.any(Number) });
    expect(body.usage.embedding_tokens).toBeGreaterThan(0);
    expect(body.usage.cost_usd).toBeGreaterThan(0);
    expect(body.performance).toMatchObject({
      retrieval_ms: expect.any(Number),
      generation_ms: expect.any(Number),
      total_ms: expect.any(Number),
    });
    // The model saw the retrieved chunks, numbered in sources order, and nothing else.
    const chat = ts.fake.requests.slice(before).find((r) => r.path.endsWith('/chat/completions'));
    const prompt = chat?.body.messages.at(-1).content as string;
    expect(prompt).toContain('[1] manual.pdf, page 2:\nThe warranty of the blue kettle');
    expect(prompt).not.toContain('office cat');
  });

  it('says plainly when the documents do not hold the answer', async () => {
    const res = await query({
      query: 'What is the capital of the kettle country?',
      workspace_id: ws.workspaceId,
    });
    const body = await res.json();
    expect(body.result.answer).toBe(NOT_FOUND_ANSWER);
    expect(body.result.confidence).toBe(0);
  });

  it('confidence_threshold drops weaker sources; max_sources caps them; include_metadata=false', async () => {
    const q = 'kettle water warranty refund widget';
    const all = await (
      await query({
        query: q,
        workspace_id: ws.workspaceId,
        options: { confidence_threshold: 0, max_sources: 50 },
      })
    ).json();
    const scores = (all.result.sources as { relevance_score: number }[]).map((s) => s.relevance_score);
    expect(scores.length).toBeGreaterThan(3);
    expect([...scores].sort((a, b) => b - a)).toEqual(scores);
    const cut = (scores[1] as number) + 1e-6;
    const strict = await (
      await query({
        query: q,
        workspace_id: ws.workspaceId,
        options: { confidence_threshold: cut, max_sources: 50 },
      })
    ).json();
    expect(strict.result.sources.map((s: { relevance_score: number }) => s.relevance_score)).toEqual(
      scores.filter((s) => s >= cut),
    );
    const two = await (
      await query({
        query: q,
        workspace_id: ws.workspaceId,
        options: { confidence_threshold: 0, max_sources: 2, include_metadata: false },
      })
    ).json();
    expect(two.result.sources).toHaveLength(2);
    expect(two.result.sources[0]).not.toHaveProperty('metadata');
    expect(two.result.sources.map((s: { content: string }) => s.content)).toEqual(
      all.result.sources.slice(0, 2).map((s: { content: string }) => s.content),
    );
  });

  it('a follow-up with session_id sees the previous turn', async () => {
    await query({
      query: 'What does the refund policy say?',
      workspace_id: ws.workspaceId,
      options: { session_id: 'conv-1' },
    });
    const before = ts.fake.requests.length;
    const res = await query({
      query: 'And within how many days?',
      workspace_id: ws.workspaceId,
      options: { session_id: 'conv-1' },
    });
    expect(res.status).toBe(200);
    const chat = ts.fake.requests.slice(before).find((r) => r.path.endsWith('/chat/completions'));
    const roles = ((chat?.body.messages ?? []) as { role: string; content: string }[]).map((m) => m.role);
    expect(roles).toEqual(['system', 'user', 'assistant', 'user']);
    expect(chat?.body.messages[1].content).toBe('What does the refund policy say?');
  });

  it('deleting a document removes its chunks, its storage file and its object', async () => {
    const docs = await (
      await ts.api(`/rag/documents?workspace_id=${ws.workspaceId}`, { key: session.token })
    ).json();
    const pdf = docs.documents.find((d: { id: string }) => d.id === pdfId);
    expect(pdf).toMatchObject({ name: 'manual.pdf', status: 'ready', chunks: 3 });
    const res = await ts.api(`/rag/documents/${pdfId}?workspace_id=${ws.workspaceId}`, {
      method: 'DELETE',
      key: session.token,
    });
    expect(res.status).toBe(200);
    expect(await chunkCount(pdfId)).toBe(0);
    const files = await ts.server.deps
      .em()
      .execute('select 1 from storage_files where id = ?', [pdf.storageFileId]);
    expect(files).toHaveLength(0);
    const after = await (
      await query({ query: 'How long does the warranty last?', workspace_id: ws.workspaceId })
    ).json();
    expect(after.result.sources.map((s: { document: string }) => s.document)).not.toContain('manual.pdf');
  });
});

describe('errors (spec 7)', () => {
  it('401 Authentication required without a session, and for an API key', async () => {
    for (const key of [null, ws.apiKey]) {
      const q = await query({ query: 'x', workspace_id: ws.workspaceId }, key);
      expect(q.status).toBe(401);
      expect(await q.json()).toEqual({ error: 'Authentication required' });
      const u = await upload(form(ws.workspaceId, [{ name: 'a.txt', body: 'hello' }]), key);
      expect(u.status).toBe(401);
      expect(await u.json()).toEqual({ error: 'Authentication required' });
    }
  });

  it('400s word for word', async () => {
    const cases: [unknown, string][] = [
      [{ workspace_id: ws.workspaceId }, 'Query is required and must be a string'],
      [{ query: 42, workspace_id: ws.workspaceId }, 'Query is required and must be a string'],
      [{ query: '  ', workspace_id: ws.workspaceId }, 'Query is required and must be a string'],
      [{ query: 'x' }, 'workspace_id is required'],
    ];
    for (const [json, error] of cases) {
      const res = await query(json);
      expect(res.status).toBe(400);
      expect((await res.json()).error).toBe(error);
    }
    const none = await upload(form(ws.workspaceId, []));
    expect(none.status).toBe(400);
    expect((await none.json()).error).toBe('At least one file is required');
    const noWs = await upload(form(undefined, [{ name: 'a.txt', body: 'x' }]));
    expect(noWs.status).toBe(400);
    expect((await noWs.json()).error).toBe('workspace_id is required');
    const onlyBad = await upload(
      form(ws.workspaceId, [{ name: 'a.exe', body: 'x', type: 'application/x-msdownload' }]),
    );
    expect(onlyBad.status).toBe(400);
    expect((await onlyBad.json()).error).toBe('File type application/x-msdownload not supported for a.exe');
  });

  it("403 Access denied to workspace for another workspace's id", async () => {
    const other = await createTestWorkspace(ts, { creditsUsd: '1' });
    const s = await createTestSession(ts, other);
    await upload(
      form(other.workspaceId, [{ name: 'secret.txt', body: 'The warranty secret is 42.' }]),
      s.token,
    );
    for (const id of [other.workspaceId, 'not-a-uuid']) {
      const q = await query({ query: 'warranty', workspace_id: id });
      expect(q.status).toBe(403);
      expect(await q.json()).toEqual({ error: 'Access denied to workspace' });
      const u = await upload(form(id, [{ name: 'a.txt', body: 'x' }]));
      expect(u.status).toBe(403);
      expect(await u.json()).toEqual({ error: 'Access denied to workspace' });
      const d = await ts.api(`/rag/documents?workspace_id=${id}`, { key: session.token });
      expect(d.status).toBe(403);
    }
    // Nor does its content leak into this workspace's answers.
    const mine = await (
      await query({
        query: 'warranty secret',
        workspace_id: ws.workspaceId,
        options: { confidence_threshold: 0 },
      })
    ).json();
    expect(JSON.stringify(mine)).not.toContain('secret is 42');
  });

  it('429 Monthly quota exceeded with quota and current_usage', async () => {
    const w = await createTestWorkspace(ts, { creditsUsd: '1' });
    const s = await createTestSession(ts, w);
    await upload(form(w.workspaceId, [{ name: 'a.txt', body: 'The refund window is ten days.' }]), s.token);
    await ts.server.deps
      .em()
      .execute('update workspaces set rag_monthly_query_quota = 2 where id = ?', [w.workspaceId]);
    const results = await Promise.all(
      [1, 2, 3].map(() => query({ query: 'refund window', workspace_id: w.workspaceId }, s.token)),
    );
    expect(results.map((r) => r.status).sort()).toEqual([200, 200, 429]);
    const refused = results.find((r) => r.status === 429) as Response;
    expect(await refused.json()).toMatchObject({
      error: 'Monthly quota exceeded',
      quota: 2,
      current_usage: 2,
    });
    const status = await new RagService(ts.server.deps).quotaStatus(w.workspaceId);
    expect(status).toMatchObject({ quota: 2, used: 2 });
  });
});

describe('internal failures (spec 7)', () => {
  /** Runs `fn` while `table` is renamed away: a real database failure, not a stubbed one. */
  async function withoutTable<T>(table: string, fn: () => Promise<T>): Promise<T> {
    const em = ts.server.deps.em();
    await em.execute(`alter table ${table} rename to ${table}_away`);
    try {
      return await fn();
    } finally {
      await em.execute(`alter table ${table}_away rename to ${table}`);
    }
  }

  it('500 Failed to process query when retrieval fails, and the query is not counted', async () => {
    await upload(form(ws.workspaceId, [{ name: 'notes.txt', body: 'The office cat is called Pixel.' }]));
    const before = await new RagService(ts.server.deps).quotaStatus(ws.workspaceId);
    const res = await withoutTable('rag_chunks', () =>
      query({ query: 'What is the cat called?', workspace_id: ws.workspaceId }),
    );
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({ error: 'Failed to process query', code: 'INTERNAL_ERROR' });
    expect(await new RagService(ts.server.deps).quotaStatus(ws.workspaceId)).toMatchObject({
      used: before.used,
    });
  });

  it('500 Failed to upload files when the index cannot record a document', async () => {
    const res = await withoutTable('rag_documents', () =>
      upload(form(ws.workspaceId, [{ name: 'more.txt', body: 'More notes.' }])),
    );
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({ error: 'Failed to upload files', code: 'INTERNAL_ERROR' });
  });
});
