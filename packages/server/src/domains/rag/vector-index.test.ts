import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestSession,
  createTestWorkspace,
  type FakeOpenAI,
  fakeOpenAIEnv,
  startTestServer,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { spawnServerProcess } from '../../test/spawn.js';
import { RagService } from './service.js';
import { VectorIndex } from './vector-index.js';

/**
 * The in-process vector index (decision 0034), on both databases (`RAG_VECTOR_INDEX=memory`
 * forces it on the embedded one too, where `auto` picks pgvector).
 */

let ts: TestServer & { fake: FakeOpenAI };
/** A second server on the same database: another node with its own index. */
let other: TestServer;
let ws: TestWorkspace;
let ws2: TestWorkspace;
let rag: RagService;
let otherRag: RagService;

const TOPICS = ['harbour', 'kettle', 'orchard', 'glacier', 'violin', 'comet', 'bakery', 'tunnel'];
const WORDS = ['quiet', 'bright', 'narrow', 'ancient', 'heavy', 'silver', 'rapid', 'gentle'];
const QUESTIONS = ['quiet harbour', 'silver comet near the bakery', 'ancient violin tunnel', 'kettle'];

function corpus(seed: number, sentences: number): string {
  const out: string[] = [];
  for (let i = 0; i < sentences; i++) {
    const t = TOPICS[(i + seed) % TOPICS.length];
    const w1 = WORDS[(i * 7 + seed) % WORDS.length];
    const w2 = WORDS[(i * 3 + 1) % WORDS.length];
    out.push(`Item ${i}: the ${w1} ${t} stood near a ${w2} ${TOPICS[(i * 5 + 2) % TOPICS.length]}.`);
  }
  return out.join(' ');
}

async function addDocument(svc: RagService, workspaceId: string, name: string, text: string) {
  const doc = await svc.createDocument({
    workspaceId,
    name,
    mimeType: 'text/plain',
    sizeBytes: null,
    storageFileId: null,
    storageKey: null,
    status: 'processing',
  });
  const n = await svc.ingest({
    workspaceId,
    documentId: doc.id,
    kind: 'text',
    body: Readable.from([text]),
    requestId: 'test',
  });
  await svc.setStatus(doc.id, 'ready', { chunks: n });
  return doc.id;
}

async function embed(text: string): Promise<number[]> {
  const model = ts.server.deps.models.resolve('embedding');
  return (await ts.server.deps.llm.embed(model, [text])).vectors[0] as number[];
}

/** Exact top `k` in JavaScript over the workspace's `real[]` embeddings, ties by id. */
async function exactTop(workspaceId: string, v: number[], k = 10) {
  const rows = await ts.server.deps
    .em()
    .execute<{ id: string; embedding: number[] }[]>(
      'select id::text as id, embedding from rag_chunks where workspace_id = ? and embedding is not null',
      [workspaceId],
    );
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return rows
    .map((r) => ({ id: r.id, s: r.embedding.reduce((acc, x, i) => acc + x * (v[i] as number), 0) / n }))
    .sort((a, b) => b.s - a.s || Number(a.id) - Number(b.id))
    .slice(0, k);
}

async function chunkIds(workspaceId: string): Promise<Set<string>> {
  const rows = await ts.server.deps
    .em()
    .execute<{ id: string }[]>('select id::text as id from rag_chunks where workspace_id = ?', [workspaceId]);
  return new Set(rows.map((r) => r.id));
}

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RAG_VECTOR_INDEX: 'memory' } });
  other = await startTestServer({ db: ts.db, env: { RAG_VECTOR_INDEX: 'memory' } });
  ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  ws2 = await createTestWorkspace(ts, { creditsUsd: '5' });
  rag = new RagService(ts.server.deps);
  otherRag = new RagService(other.server.deps);
  await rag.provision(ws.workspaceId);
  await rag.provision(ws2.workspaceId);
  await addDocument(rag, ws.workspaceId, 'a.txt', corpus(0, 400));
  // The other workspace holds the same kind of text: its chunks are as near to every question.
  await addDocument(rag, ws2.workspaceId, 'b.txt', corpus(0, 400));
}, 240_000);
afterAll(async () => {
  await other?.close();
  await ts?.close();
});

describe('in-process vector index', () => {
  it('is the vector stage where asked (and where pgvector is absent)', async () => {
    expect(await rag.vectorMode()).toBe('memory');
  });

  it('stores chunks without making an HNSW index, which nothing would query (decision 0038)', async () => {
    // Keeping one up to date was most of an indexing batch's work on PGlite, growing with the
    // table. (The PostgreSQL server of CI has no pgvector: no index there either way.)
    const indexes = await ts.server.deps
      .em()
      .execute<{ name: string }[]>(
        `select indexname as name from pg_indexes where tablename = 'rag_chunks' and indexname like 'rag_chunks_hnsw_%'`,
      );
    expect(indexes).toEqual([]);
    const chunks = await ts.server.deps
      .em()
      .execute<{ n: number }[]>('select count(*)::int as n from rag_chunks where embedding is not null');
    expect(chunks[0]?.n).toBeGreaterThan(0);
  });

  it('gives the same top 10 as an exact search in JavaScript and in SQL, on a fixed corpus', async () => {
    for (const q of QUESTIONS) {
      const v = await embed(q);
      const exact = await exactTop(ws.workspaceId, v);
      const memory = await rag.vectorStage(ws.workspaceId, v, 10, 'memory');
      const sql = await rag.vectorStage(ws.workspaceId, v, 10, 'exact');
      expect(memory.map((r) => r.id)).toEqual(exact.map((r) => r.id));
      expect(sql.map((r) => r.id)).toEqual(exact.map((r) => r.id));
      for (const [i, r] of memory.entries()) expect(r.similarity).toBeCloseTo(exact[i]?.s as number, 5);
    }
    expect(rag.vectorIndex().holds(ws.workspaceId)).toBe(true);
  });

  it("never returns another workspace's chunks", async () => {
    const own = await chunkIds(ws.workspaceId);
    const theirs = await chunkIds(ws2.workspaceId);
    expect(theirs.size).toBeGreaterThan(0);
    for (const q of QUESTIONS) {
      const hits = await rag.vectorStage(ws.workspaceId, await embed(q), 50, 'memory');
      expect(hits.length).toBe(Math.min(50, own.size));
      for (const h of hits) {
        expect(own.has(h.id)).toBe(true);
        expect(theirs.has(h.id)).toBe(false);
      }
    }
    // A workspace without an index row (never provisioned) has no vectors.
    const bare = await createTestWorkspace(ts);
    expect(await rag.vectorStage(bare.workspaceId, await embed('kettle'), 10, 'memory')).toEqual([]);
  });

  it('sees chunks added and documents deleted on the database at the next query, on another node too', async () => {
    const v = await embed('zanzibar quokka marmalade');
    // Both nodes hold the workspace before the change.
    await rag.vectorStage(ws.workspaceId, v, 10, 'memory');
    await otherRag.vectorStage(ws.workspaceId, v, 10, 'memory');
    const before = otherRag.vectorIndex().info();

    // Added through the other node's ingest: both see it first at the next query.
    const docId = await addDocument(
      rag,
      ws.workspaceId,
      'new.txt',
      'The zanzibar quokka ate marmalade. Zanzibar quokka marmalade is rare.',
    );
    const top = await otherRag.vectorStage(ws.workspaceId, v, 10, 'memory');
    expect(top).toEqual(
      (await exactTop(ws.workspaceId, v)).map((r) => expect.objectContaining({ id: r.id })),
    );
    const docChunks = await ts.server.deps
      .em()
      .execute<{ id: string }[]>('select id::text as id from rag_chunks where document_id = ?', [docId]);
    expect(docChunks.length).toBeGreaterThan(0);
    expect(top[0]?.id).toBe(docChunks[0]?.id);
    expect((await rag.vectorStage(ws.workspaceId, v, 10, 'memory'))[0]?.id).toBe(docChunks[0]?.id);
    const afterAdd = otherRag.vectorIndex().info();
    expect(afterAdd.incrementalLoads).toBe(before.incrementalLoads + 1);
    expect(afterAdd.fullLoads).toBe(before.fullLoads);

    // A chunk inserted by plain SQL (no service code) is seen too.
    const [{ id: sqlId } = { id: '' }] = await ts.server.deps.em().execute<{ id: string }[]>(
      `insert into rag_chunks (document_id, workspace_id, chunk_index, page, content, embedding, dims)
       values (?, ?, 99, 1, 'inserted by SQL', ?::real[], ?) returning id::text as id`,
      [docId, ws.workspaceId, `{${v.map((x) => x / Math.hypot(...v)).join(',')}}`, v.length],
    );
    const withSql = await otherRag.vectorStage(ws.workspaceId, v, 10, 'memory');
    expect(withSql[0]?.id).toBe(sqlId);
    expect(withSql[0]?.similarity).toBeCloseTo(1, 5);

    // Deleted (the cascade from the document): gone at the next query on both nodes.
    await rag.deleteDocument(ws.workspaceId, docId);
    const gone = new Set([...docChunks.map((r) => r.id), sqlId]);
    for (const node of [otherRag, rag]) {
      const hits = await node.vectorStage(ws.workspaceId, v, 50, 'memory');
      expect(hits.some((h) => gone.has(h.id))).toBe(false);
      expect(hits.map((h) => h.id)).toEqual((await exactTop(ws.workspaceId, v, 50)).map((r) => r.id));
    }
    expect(otherRag.vectorIndex().info().fullLoads).toBe(afterAdd.fullLoads + 1);
  });

  it('keeps within its memory budget, dropping the least recently searched workspace', async () => {
    const v = await embed('gentle orchard');
    const entryBytes = async (workspaceId: string) => {
      const probe = new VectorIndex(() => ts.server.deps.em(), 1e9);
      await probe.search(workspaceId, v, 10);
      return probe.info().bytes;
    };
    const one = await entryBytes(ws.workspaceId);
    const two = await entryBytes(ws2.workspaceId);
    expect(one).toBeGreaterThan(0);

    // Room for either workspace, not both.
    const idx = new VectorIndex(() => ts.server.deps.em(), Math.max(one, two) + Math.min(one, two) / 2);
    const a1 = await idx.search(ws.workspaceId, v, 10);
    expect(idx.holds(ws.workspaceId)).toBe(true);
    const b1 = await idx.search(ws2.workspaceId, v, 10);
    expect(idx.holds(ws2.workspaceId)).toBe(true);
    expect(idx.holds(ws.workspaceId)).toBe(false);
    expect(idx.info()).toMatchObject({ workspaces: 1, evictions: 1 });
    expect(idx.info().bytes).toBeLessThanOrEqual(idx.budgetBytes);
    // Searched again, the evicted one is loaded again with the same answer.
    expect(await idx.search(ws.workspaceId, v, 10)).toEqual(a1);
    expect(idx.holds(ws2.workspaceId)).toBe(false);
    expect(b1?.map((h) => h.id)).toEqual((await exactTop(ws2.workspaceId, v)).map((r) => r.id));

    // A workspace larger than the whole budget is not held; the vector stage scans in SQL instead.
    const tiny = new VectorIndex(() => ts.server.deps.em(), Math.floor(one / 2));
    expect(await tiny.search(ws.workspaceId, v, 10)).toBeUndefined();
    expect(tiny.info()).toMatchObject({ workspaces: 0, bytes: 0 });
  });

  it('serves a workspace over the budget through the exact scan in SQL', async () => {
    const small = await startTestServer({
      db: ts.db,
      env: { RAG_VECTOR_INDEX: 'memory', RAG_VECTOR_CACHE_MB: '0' },
    });
    try {
      const svc = new RagService(small.server.deps);
      const v = await embed('bright comet');
      const hits = await svc.vectorStage(ws.workspaceId, v, 10);
      expect(hits.map((h) => h.id)).toEqual((await exactTop(ws.workspaceId, v)).map((r) => r.id));
      expect(svc.vectorIndex().holds(ws.workspaceId)).toBe(false);
    } finally {
      await small.close();
    }
  });

  it.skipIf(!process.env.DATABASE_URL)(
    'a second server process on the same PostgreSQL database sees a chunk added and a document deleted at its next query',
    async () => {
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-vector-node-'));
      const child = spawnServerProcess({
        ...fakeOpenAIEnv(ts.fake),
        DATABASE_URL: ts.db.databaseUrl,
        DATA_DIR: dataDir,
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'info',
        RAG_VECTOR_INDEX: 'memory',
      });
      let out = '';
      child.stdout?.on('data', (d) => {
        out += d.toString();
      });
      try {
        await expect
          .poll(
            () => /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1] ?? (child.exitCode !== null ? out : undefined),
            {
              timeout: 240_000, // a server process starting under heavy load
              interval: 200,
            },
          )
          .toMatch(/^http:\/\//);
        const url = /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1];
        const session = await createTestSession(ts, ws);
        const ask = async () => {
          const res = await fetch(`${url}/api/v1/rag/query`, {
            method: 'POST',
            headers: { authorization: `Bearer ${session.token}`, 'content-type': 'application/json' },
            body: JSON.stringify({
              query: 'yodel xylophone walrus',
              workspace_id: ws.workspaceId,
              options: { confidence_threshold: 0, max_sources: 50, include_metadata: true },
            }),
          });
          expect(res.status).toBe(200);
          const body = (await res.json()) as {
            result: { sources: { document: string; metadata?: { vector_rank: number | null } }[] };
          };
          return body.result.sources;
        };
        // The child loads the workspace's vectors at its first query.
        expect((await ask()).some((s) => s.document === 'walrus.txt')).toBe(false);

        // Added on this node: the child's next query finds it, first by vector.
        const docId = await addDocument(
          rag,
          ws.workspaceId,
          'walrus.txt',
          'The yodel xylophone walrus sang. A yodel, a xylophone and a walrus.',
        );
        const found = (await ask()).find((s) => s.document === 'walrus.txt');
        expect(found?.metadata?.vector_rank).toBe(1);

        // Deleted on this node: gone from the child's next answer.
        await rag.deleteDocument(ws.workspaceId, docId);
        expect((await ask()).some((s) => s.document === 'walrus.txt')).toBe(false);
      } finally {
        if (child.exitCode === null && child.signalCode === null) {
          const exited = once(child, 'exit');
          child.kill('SIGTERM');
          await exited;
        }
        fs.rmSync(dataDir, { recursive: true, force: true });
      }
    },
    360_000,
  );
});
