import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { FTS_CANDIDATE_BUDGET, idf, planFullText } from './retrieval.js';
import { RagService } from './service.js';

/**
 * The full-text stage (decision 0033): lexemes weighted by rarity (BM25 idf over the
 * workspace's chunks, counted in `rag_lexeme_df` by triggers), candidates taken from the
 * rarest lexemes within a budget. No embedding model here: full text only.
 */
let ts: TestServer;
let ws: TestWorkspace;
let rag: RagService;

async function addDocument(name: string, text: string): Promise<string> {
  const doc = await rag.createDocument({
    workspaceId: ws.workspaceId,
    name,
    mimeType: 'text/plain',
    sizeBytes: null,
    storageFileId: null,
    storageKey: null,
    status: 'processing',
  });
  await rag.ingest({
    workspaceId: ws.workspaceId,
    documentId: doc.id,
    kind: 'text',
    body: Readable.from([text]),
    requestId: 'test',
  });
  return doc.id;
}

/** Rows where the maintained counts differ from a count over the chunks (0 when in sync). */
async function driftRows(workspaceId: string): Promise<number> {
  const rows = await ts.server.deps.em().execute<{ n: string }[]>(
    `with truth as (
       select l as lexeme, count(*)::int as df
       from rag_chunks, unnest(array_append(tsvector_to_array(tsv), ''::text)) as l
       where workspace_id = ? group by l),
     kept as (select lexeme, df from rag_lexeme_df where workspace_id = ?)
     select count(*) as n from truth full join kept using (lexeme)
     where truth.df is distinct from kept.df`,
    [workspaceId, workspaceId],
  );
  return Number(rows[0]?.n);
}

async function contentOf(id: string): Promise<string> {
  const rows = await ts.server.deps
    .em()
    .execute<{ content: string }[]>('select content from rag_chunks where id = ?', [id]);
  return rows[0]?.content ?? '';
}

beforeAll(async () => {
  ts = await startTestServer();
  ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  rag = new RagService(ts.server.deps);
  await rag.provision(ws.workspaceId);
}, 180_000);

afterAll(async () => {
  await ts?.close();
});

describe('planFullText', () => {
  it('takes the rarest lexemes within the budget, at least one; all common words add the conjunction', () => {
    const n = 100_000;
    const plan = planFullText(
      [
        { lexeme: 'unit', df: 60_000 },
        { lexeme: 'kalomiru', df: 1 },
        { lexeme: 'load', df: FTS_CANDIDATE_BUDGET - 5 },
        { lexeme: 'absent', df: 0 },
        { lexeme: 'maximum', df: 9 },
      ],
      n,
    );
    expect(plan.terms.map((t) => t.lexeme)).toEqual(['kalomiru', 'maximum', 'load', 'unit']);
    expect(plan.candidateTerms).toBe(2);
    expect(plan.conjunction).toBe(false);
    expect(plan.terms[0]?.idf).toBeCloseTo(idf(n, 1), 10);
    expect(plan.terms[0]?.idf).toBeGreaterThan(plan.terms[3]?.idf as number);

    const common = planFullText(
      [
        { lexeme: 'unit', df: 60_000 },
        { lexeme: 'load', df: 50_000 },
      ],
      n,
    );
    expect(common.candidateTerms).toBe(1);
    expect(common.terms[0]?.lexeme).toBe('load');
    expect(common.conjunction).toBe(true);
    expect(planFullText([], n).terms).toEqual([]);
  });
});

describe('full-text stage', { timeout: 180_000 }, () => {
  it('keeps the lexeme counts in step with the chunks through ingest, re-index and delete', async () => {
    const a = await addDocument('a.txt', 'The harbour crane lifts containers. The harbour is busy at dawn.');
    const b = await addDocument(
      'b.txt',
      'An orchard of apple trees near the harbour. Apples ripen in autumn.',
    );
    expect(await driftRows(ws.workspaceId)).toBe(0);
    const counts = await ts.server.deps
      .em()
      .execute<{ lexeme: string; df: number }[]>(
        `select lexeme, df from rag_lexeme_df where workspace_id = ? and lexeme in ('', 'harbour', 'orchard') order by lexeme`,
        [ws.workspaceId],
      );
    expect(counts.map((r) => [r.lexeme, Number(r.df)])).toEqual([
      ['', 2],
      ['harbour', 2],
      ['orchard', 1],
    ]);
    await addDocument('c.txt', 'x'.repeat(10));
    await rag.deleteDocument(ws.workspaceId, a);
    expect(await driftRows(ws.workspaceId)).toBe(0);
    await rag.deleteDocument(ws.workspaceId, b);
    expect(await driftRows(ws.workspaceId)).toBe(0);
    const left = await ts.server.deps
      .em()
      .execute<{ n: string }[]>(
        `select count(*) as n from rag_lexeme_df where workspace_id = ? and lexeme = 'harbour'`,
        [ws.workspaceId],
      );
    expect(Number(left[0]?.n)).toBe(0);
  });

  it('ranks the page naming the rare entity above pages repeating the common words', async () => {
    const other = await createTestWorkspace(ts, { creditsUsd: '1' });
    const svc = new RagService(ts.server.deps);
    await svc.provision(other.workspaceId);
    // 40 pages (chunks) about the maximum load of some unit, said twice; one names the Kalomiru.
    const em = ts.server.deps.em();
    const doc = await svc.createDocument({
      workspaceId: other.workspaceId,
      name: 'catalogue.pdf',
      mimeType: 'application/pdf',
      sizeBytes: null,
      storageFileId: null,
      storageKey: null,
      status: 'ready',
    });
    const pages = Array.from({ length: 40 }, (_, i) =>
      i === 17
        ? 'The Kalomiru unit has a maximum load of 420 kilograms.'
        : `The Zentor${i} unit has a maximum load of ${100 + i} kilograms. Maximum load of every unit is checked; the unit load is maximum at noon.`,
    );
    await em.execute(
      `insert into rag_chunks (document_id, workspace_id, chunk_index, page, content)
       select ?, ?, i - 1, i, p from unnest(?::text[]) with ordinality as t(p, i)`,
      [doc.id, other.workspaceId, `{${pages.map((p) => `"${p}"`).join(',')}}`],
    );
    const hits = await svc.fullTextStage(other.workspaceId, 'What is the maximum load of the Kalomiru unit?');
    expect(hits).toHaveLength(40);
    expect(await contentOf(hits[0]?.id as string)).toContain('Kalomiru');
    // Scores are sums of idf: the Kalomiru page has every lexeme, the others all but one.
    expect(hits[0]?.score).toBeGreaterThan(hits[1]?.score as number);
  });

  it('over the budget: candidates from the rarest lexeme; only common words use their conjunction', async () => {
    const big = await createTestWorkspace(ts, { creditsUsd: '1' });
    const svc = new RagService(ts.server.deps);
    await svc.provision(big.workspaceId);
    const doc = await svc.createDocument({
      workspaceId: big.workspaceId,
      name: 'big.txt',
      mimeType: 'text/plain',
      sizeBytes: null,
      storageFileId: null,
      storageKey: null,
      status: 'ready',
    });
    // Every chunk says "river", one in two "stone", one in three "bridge" (each more than the
    // budget); chunk 1234 alone says "lantern".
    const n = FTS_CANDIDATE_BUDGET * 3 + 300;
    await ts.server.deps.em().execute(
      `insert into rag_chunks (document_id, workspace_id, chunk_index, page, content)
       select ?, ?, i, 1,
         'The river ' || (case when i % 2 = 0 then 'stone ' else '' end)
           || (case when i % 3 = 0 then 'bridge ' else '' end)
           || (case when i = 1234 then 'lantern ' else '' end) || 'passage ' || i
       from generate_series(0, ? - 1) as i`,
      [doc.id, big.workspaceId, n],
    );
    expect(await driftRows(big.workspaceId)).toBe(0);
    const rare = await svc.fullTextStage(big.workspaceId, 'the lantern by the river stone');
    expect(await contentOf(rare[0]?.id as string)).toMatch(/lantern passage 1234$/);
    // Only common words: the chunks holding all of them come first.
    const common = await svc.fullTextStage(big.workspaceId, 'river stone bridge');
    expect(common.length).toBeGreaterThan(3);
    for (const h of common.slice(0, 3)) {
      const text = await contentOf(h.id);
      expect(text).toContain('stone');
      expect(text).toContain('bridge');
    }
    await svc.deleteDocument(big.workspaceId, doc.id);
    expect(await driftRows(big.workspaceId)).toBe(0);
  });
});
