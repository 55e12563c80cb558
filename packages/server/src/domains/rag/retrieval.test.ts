import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { fuse } from './retrieval.js';
import { RagService } from './service.js';

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let rag: RagService;

const TOPICS = ['harbour', 'kettle', 'orchard', 'glacier', 'violin', 'comet', 'bakery', 'tunnel'];
const WORDS = [
  'quiet',
  'bright',
  'narrow',
  'ancient',
  'heavy',
  'silver',
  'rapid',
  'gentle',
  'hollow',
  'curious',
];

/** A fixed corpus: 600 sentences mixing topics and words deterministically (about 36 chunks). */
function corpus(): string {
  const out: string[] = [];
  for (let i = 0; i < 600; i++) {
    const t = TOPICS[i % TOPICS.length];
    const w1 = WORDS[(i * 7) % WORDS.length];
    const w2 = WORDS[(i * 3 + 1) % WORDS.length];
    out.push(`Item ${i}: the ${w1} ${t} stood near a ${w2} ${TOPICS[(i * 5 + 2) % TOPICS.length]}.`);
  }
  return out.join(' ');
}

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  rag = new RagService(ts.server.deps);
  await rag.provision(ws.workspaceId);
  const doc = await rag.createDocument({
    workspaceId: ws.workspaceId,
    name: 'corpus.txt',
    mimeType: 'text/plain',
    sizeBytes: null,
    storageFileId: null,
    storageKey: null,
    status: 'processing',
  });
  const n = await rag.ingest({
    workspaceId: ws.workspaceId,
    documentId: doc.id,
    kind: 'text',
    body: Readable.from([corpus()]),
    requestId: 'test',
  });
  expect(n).toBeGreaterThan(30);
}, 180_000);
afterAll(() => ts?.close());

async function embed(text: string): Promise<number[]> {
  const model = ts.server.deps.models.resolve('embedding');
  return (await ts.server.deps.llm.embed(model, [text])).vectors[0] as number[];
}

describe('vector stage', () => {
  it('uses pgvector on the embedded database and the in-process index on the server (decision 0034)', async () => {
    expect(await rag.vectorMode()).toBe(process.env.DATABASE_URL ? 'memory' : 'pgvector');
  });

  it('gives the same top 10 on both paths as an exact search in JavaScript, on a fixed corpus', async () => {
    const rows = await ts.server.deps
      .em()
      .execute<{ id: string; embedding: number[] }[]>(
        'select id::text as id, embedding from rag_chunks where workspace_id = ?',
        [ws.workspaceId],
      );
    const mode = await rag.vectorMode();
    for (const q of ['quiet harbour', 'silver comet near the bakery', 'ancient violin tunnel', 'kettle']) {
      const v = await embed(q);
      const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
      const exact = rows
        .map((r) => ({ id: r.id, s: r.embedding.reduce((acc, x, i) => acc + x * (v[i] as number), 0) / n }))
        .sort((a, b) => b.s - a.s || Number(a.id) - Number(b.id))
        .slice(0, 10);
      const fallback = await rag.vectorStage(ws.workspaceId, v, 10, 'exact');
      expect(fallback.map((r) => r.id)).toEqual(exact.map((r) => r.id));
      for (const [i, r] of fallback.entries()) expect(r.similarity).toBeCloseTo(exact[i]?.s as number, 5);
      const memory = await rag.vectorStage(ws.workspaceId, v, 10, 'memory');
      expect(memory.map((r) => r.id)).toEqual(exact.map((r) => r.id));
      if (mode === 'pgvector') {
        const hnsw = await rag.vectorStage(ws.workspaceId, v, 10, 'pgvector');
        expect(hnsw.map((r) => r.similarity.toFixed(5))).toEqual(
          fallback.map((r) => r.similarity.toFixed(5)),
        );
      }
    }
  });

  it('full-text stage matches any word of the question, best first', async () => {
    const fts = await rag.fullTextStage(ws.workspaceId, 'What about the glacier?');
    expect(fts.length).toBeGreaterThan(0);
    const scores = fts.map((r) => r.score);
    expect([...scores].sort((a, b) => b - a)).toEqual(scores);
    expect(await rag.fullTextStage(ws.workspaceId, 'the of and')).toEqual([]);
  });
});

describe('fusion', () => {
  it('normalises reciprocal rank fusion to 0..1: 1 for the top of both stages, 0.5 for the top of one', () => {
    const out = fuse(
      [
        { id: 'a', score: 3 },
        { id: 'b', score: 2 },
      ],
      [
        { id: 'a', similarity: 0.9 },
        { id: 'c', similarity: 0.8 },
      ],
    );
    expect(out.map((c) => [c.id, Number(c.relevance.toFixed(4))])).toEqual([
      ['a', 1],
      ['b', Number((61 / 62 / 2).toFixed(4))],
      ['c', Number((61 / 62 / 2).toFixed(4))],
    ]);
    const ftsOnly = fuse([{ id: 'x', score: 1 }], undefined);
    expect(ftsOnly[0]?.relevance).toBe(1);
  });
});
