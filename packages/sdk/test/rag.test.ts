import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import {
  createTestSession,
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AiSuite,
  AuthenticationError,
  BadRequestError,
  NotFoundError,
  PermissionDeniedError,
  type RagSource,
  type StorageIndexStatus,
} from '../src/index.js';

/** A stand-in for a model that follows the prompt: cites the numbered source holding a word of the question. */
function citingModel(body: { messages: { role: string; content: string }[] }) {
  const last = body.messages.at(-1)?.content ?? '';
  const question = (/Question: (.*)$/s.exec(last)?.[1] ?? '').toLowerCase();
  const sources = [...last.matchAll(/^\[(\d+)\] [^\n]*\n([\s\S]*?)(?=\n\n\[\d+\] |\n\nQuestion: )/gm)];
  const key = ['warranty', 'kettle', 'invoice', 'parrot'].find((w) => question.includes(w));
  const hit = key ? sources.find((s) => (s[2] ?? '').toLowerCase().includes(key)) : undefined;
  if (!hit) return { text: 'NOT_IN_DOCUMENTS' };
  return { text: `According to the documents, ${(hit[2] ?? '').split('. ')[0]} [${hit[1]}].` };
}

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let client: AiSuite;
let dir: string;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ fake: { defaultReply: citingModel } });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  const s = await createTestSession(ts, ws);
  client = new AiSuite({ baseURL: ts.url, sessionToken: s.token, maxRetries: 0 });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-rag-'));
}, 180_000);
afterAll(async () => {
  await ts?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

describe('client.rag', () => {
  it('is refused before the first upload (typed 403)', async () => {
    await expect(client.rag.documents.list()).rejects.toBeInstanceOf(PermissionDeniedError);
  });

  it('uploads a path, a named Buffer, a File and a Node stream; queries cite them; list and delete', async () => {
    const p = path.join(dir, 'warranty.txt');
    fs.writeFileSync(p, 'The warranty of the kettle lasts 24 months from the date of purchase.');
    const streamed = path.join(dir, 'parrot.md');
    fs.writeFileSync(streamed, '# Pets\n\nThe parrot named Polly eats sunflower seeds every morning.');
    const up = await client.rag.upload(
      [
        p,
        {
          name: 'invoice.txt',
          content: Buffer.from('The invoice number 4411 is due on the first of March.'),
        },
        new File(['Tea is brewed at eighty degrees for green leaves.'], 'tea.txt', { type: 'text/plain' }),
        fs.createReadStream(streamed),
        { name: 'notes.txt', content: Readable.from(['Lighthouses ', 'guide ships at night.']) },
      ],
      { workspaceId: ws.workspaceId },
    );
    expect(up.status).toBe('success');
    expect(up.results).toMatchObject({ successful: 5, failed: 0 });
    expect(up.results.details.map((d) => [d.filename, d.status])).toEqual([
      ['warranty.txt', 'completed'],
      ['invoice.txt', 'completed'],
      ['tea.txt', 'completed'],
      ['parrot.md', 'completed'],
      ['notes.txt', 'completed'],
    ]);
    for (const d of up.results.details) expect(d.chunks).toBeGreaterThan(0);

    // The session's workspace is the default.
    const out = await client.rag.query({
      query: 'How long is the warranty of the kettle?',
      options: { confidence_threshold: 0 },
    });
    expect(out.workspace_id).toBe(ws.workspaceId);
    const first: RagSource | undefined = out.result.sources[0];
    expect(first?.document).toBe('warranty.txt');
    expect(first?.page).toBe(1);
    expect(first?.content).toContain('24 months');
    expect(first?.relevance_score).toBeGreaterThan(0);
    expect(first?.relevance_score).toBeLessThanOrEqual(1);
    expect(out.result.answer).toContain('[1]');
    expect(out.result.answer).toContain('24 months');
    expect(out.usage.total_tokens).toBeGreaterThan(0);

    const stream = await client.rag.query({
      query: 'What does the parrot eat?',
      options: { confidence_threshold: 0 },
    });
    expect(stream.result.sources[0]?.document).toBe('parrot.md');

    const { documents } = await client.rag.documents.list();
    expect(documents.map((d) => d.name).sort()).toEqual([
      'invoice.txt',
      'notes.txt',
      'parrot.md',
      'tea.txt',
      'warranty.txt',
    ]);
    expect(documents.every((d) => d.status === 'ready' && d.chunks > 0)).toBe(true);

    const warranty = documents.find((d) => d.name === 'warranty.txt');
    if (!warranty) throw new Error('warranty.txt not listed');
    const again = await client.rag.documents.reindex(warranty.id);
    expect(again).toMatchObject({ id: warranty.id, status: 'ready' });

    expect(await client.rag.documents.delete(warranty.id, { workspaceId: ws.workspaceId })).toEqual({
      deleted: true,
    });
    expect((await client.rag.documents.list()).documents.map((d) => d.name)).not.toContain('warranty.txt');
    await expect(client.rag.documents.delete(warranty.id)).rejects.toBeInstanceOf(NotFoundError);
    const after = await client.rag.query({
      query: 'How long is the warranty of the kettle?',
      options: { confidence_threshold: 0 },
    });
    expect(after.result.sources.map((s) => s.document)).not.toContain('warranty.txt');
  });

  it('typed errors: an unsupported type, a nameless Blob, an empty question', async () => {
    const err = await client.rag
      .upload([{ name: 'tool.exe', content: Buffer.from('MZ'), type: 'application/x-msdownload' }])
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BadRequestError);
    expect((err as BadRequestError).message).toBe(
      'File type application/x-msdownload not supported for tool.exe',
    );
    await expect(client.rag.upload([new Blob(['x']) as File])).rejects.toBeInstanceOf(TypeError);
    await expect(client.rag.query({ query: '' })).rejects.toBeInstanceOf(BadRequestError);
  });

  it('an API-key client gets the typed authentication error', async () => {
    const keyed = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, maxRetries: 0 });
    const q = await keyed.rag
      .query({ query: 'warranty?', workspaceId: ws.workspaceId })
      .catch((e: unknown) => e);
    expect(q).toBeInstanceOf(AuthenticationError);
    expect((q as AuthenticationError).message).toBe('Authentication required');
    await expect(
      keyed.rag.upload([{ name: 'a.txt', content: Buffer.from('a') }], { workspaceId: ws.workspaceId }),
    ).rejects.toBeInstanceOf(AuthenticationError);
    await expect(keyed.rag.documents.list({ workspaceId: ws.workspaceId })).rejects.toBeInstanceOf(
      AuthenticationError,
    );
  });

  it('storage.index: an API-key client queues a storage file; it becomes ready and a session finds it', async () => {
    const keyed = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, maxRetries: 0 });
    const imported = await keyed.storage.import({
      files: [
        { path: 'notes/invoice.md', content: Buffer.from('The invoice for the kettle is due on the fifth.') },
      ],
    });
    const fileId = imported.fileIds[0] as string;
    const queued = await keyed.storage.index(fileId);
    expect(queued.file.id).toBe(fileId);
    const states: StorageIndexStatus[] = ['queued', 'processing', 'ready'];
    expect(states).toContain(queued.file.indexStatus);
    await expect
      .poll(
        async () => {
          for await (const f of keyed.storage.list({ type: 'files' }))
            if (f.id === fileId) return f.indexStatus;
          return undefined;
        },
        { timeout: 30_000, interval: 100 },
      )
      .toBe('ready');
    const doc = (await client.rag.documents.list()).documents.find((d) => d.id === queued.documentId);
    expect(doc).toMatchObject({ origin: 'storage', status: 'ready', storageFileId: fileId });
    const err = await keyed.storage.index('00000000-0000-4000-8000-000000000000').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
  });
});
