/**
 * Where the time of an indexing batch goes as the chunk table grows (bench/README.md, `rag`;
 * the figures: decision 0038, the HNSW index, not GIN or `rag_lexeme_df`), in one command:
 *
 *   pnpm --filter @ai-suite/bench-rag exec tsx src/ingest-statements.ts
 *
 * Per database, one server (TypeScript sources, in this process; the embedded database on disk
 * in a temporary DATA_DIR, as `pnpm start` runs it), one workspace and document, then the chunks
 * of a generated CSV (the bench's `prices.csv` rows, chunked by the service's chunker) inserted
 * as the service inserts them: batches of `EMBED_BATCH` with 64-dimension unit embeddings, one
 * statement and one transaction each, the HNSW index made first where pgvector exists. At each
 * checkpoint (BENCH_STEPS, chunks in the table) `BENCH_PROBE` batches are timed one by one, with
 * EXPLAIN ANALYZE's trigger times and the block counts of every rag_* relation; between
 * checkpoints the table grows with the same statement untimed, so what is printed at a size
 * does not depend on how the table got there.
 *
 * BENCH_DATABASES (`embedded,postgres`), BENCH_PG_URL (`postgres://postgres@127.0.0.1:5432/test`),
 * BENCH_STEPS (`1000,10000,50000`), BENCH_PROBE (30 batches), BENCH_HNSW (1; 0: no HNSW index, as
 * the service stores chunks with `RAG_VECTOR_INDEX=memory` or without pgvector).
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { createServer } from '@ai-suite/server';
import { createServerDatabase, createTestWorkspace, type TestServer } from '@ai-suite/server/test-harness';
import { type Chunk, Chunker } from '../../../packages/server/src/domains/rag/chunk.js';
import { extractSegments } from '../../../packages/server/src/domains/rag/extract.js';
import { EMBED_BATCH } from '../../../packages/server/src/domains/rag/ingest.js';
import { RagService } from '../../../packages/server/src/domains/rag/service.js';
import { CSV_HEADER, csvRow, prng, word } from './generate.js';

const env = process.env;
const DATABASES = (env.BENCH_DATABASES ?? 'embedded,postgres').split(',');
const PG_URL = env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const STEPS = (env.BENCH_STEPS ?? '1000,10000,50000').split(',').map(Number);
const PROBE = Number(env.BENCH_PROBE ?? 30);
const DIMS = 64;
/** 0: no HNSW index (as the service stores chunks with `RAG_VECTOR_INDEX=memory` or without pgvector). */
const HNSW = env.BENCH_HNSW !== '0';

const rand = prng(14);
const COMMON = Array.from({ length: 2000 }, () => word(rand));

/** The chunks of a CSV of `rows` rows shaped like the bench's (main.ts, `writeCsv`), from row `first`. */
async function csvChunks(first: number, rows: number): Promise<Chunk[]> {
  let text = CSV_HEADER;
  for (let r = first; r < first + rows; r++) text += csvRow(r, rand, COMMON);
  const chunker = new Chunker();
  const out: Chunk[] = [];
  for await (const seg of extractSegments('csv', Readable.from([Buffer.from(text)])))
    out.push(...chunker.push(seg));
  out.push(...chunker.end());
  return out;
}

function unitVector(): string {
  const v = Array.from({ length: DIMS }, () => rand() - 0.5);
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0)) || 1;
  return `{${v.map((x) => (x / n).toFixed(6)).join(',')}}`;
}

interface Sql {
  query<T = Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
}

const STATIO = `select relname as rel, coalesce(heap_blks_read, 0) + coalesce(idx_blks_read, 0) + coalesce(toast_blks_read, 0) as read,
  coalesce(heap_blks_hit, 0) + coalesce(idx_blks_hit, 0) + coalesce(toast_blks_hit, 0) as hit
  from pg_statio_user_tables where relname like 'rag_%'
  union all select indexrelname, idx_blks_read, idx_blks_hit from pg_statio_user_indexes where relname like 'rag_%'`;

async function runDatabase(name: string): Promise<void> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-ingest-stmts-'));
  const db = name === 'postgres' ? await createServerDatabase(PG_URL, 'bench_ingest') : undefined;
  const server = await createServer({
    env: { LOG_LEVEL: 'silent', DATA_DIR: dataDir, DATABASE_URL: db?.databaseUrl },
  });
  const em = server.deps.em();
  const sql: Sql = {
    query: async <T>(text: string, params: unknown[] = []) => (await em.execute(text, params)) as T[],
  };
  try {
    const ws = await createTestWorkspace({ server } as unknown as TestServer);
    const rag = new RagService(server.deps, em);
    await rag.provision(ws.workspaceId);
    const documentId = randomUUID();
    await sql.query(
      `insert into rag_documents (id, workspace_id, name, mime_type, status) values (?, ?, 'prices.csv', 'text/csv', 'processing')`,
      [documentId, ws.workspaceId],
    );
    const mode = await sql.query<{ n: number }>(
      `select count(*)::int as n from pg_extension where extname = 'vector'`,
    );
    if (mode[0]?.n && HNSW) {
      await sql.query(
        `create index if not exists rag_chunks_hnsw_${DIMS} on rag_chunks using hnsw ((embedding::vector(${DIMS})) vector_cosine_ops) where dims = ${DIMS}`,
      );
    }
    const gin = await sql.query<{ opts: string | null }>(
      `select array_to_string(reloptions, ',') as opts from pg_class where relname = 'rag_chunks_tsv_idx'`,
    );
    console.log(
      `\n## ${name}${HNSW ? '' : ' (no HNSW index)'}: rag_chunks_tsv_idx options ${gin[0]?.opts ?? '(defaults)'}, ${pgVersionNote(await sql.query<{ v: string }>('select version() as v'))}`,
    );
    let row = 1;
    let index = 0;
    let pending: Chunk[] = [];
    const nextBatch = async (): Promise<Chunk[]> => {
      while (pending.length < EMBED_BATCH) {
        const more = await csvChunks(row, 500);
        row += 500;
        pending.push(...more);
      }
      const batch = pending.slice(0, EMBED_BATCH);
      pending = pending.slice(EMBED_BATCH);
      return batch;
    };
    const insert = async (explain: boolean) => {
      const batch = await nextBatch();
      const values = batch.map(() => '(?, ?, ?, ?, ?, ?::real[], ?)').join(', ');
      const params = batch.flatMap((c) => [
        documentId,
        ws.workspaceId,
        index++,
        c.page,
        c.content,
        unitVector(),
        DIMS,
      ]);
      const text = `insert into rag_chunks (document_id, workspace_id, chunk_index, page, content, embedding, dims) values ${values}`;
      if (!explain) {
        await sql.query(text, params);
        return undefined;
      }
      const t0 = performance.now();
      const res = await sql.query<{ 'QUERY PLAN': unknown }>(
        `explain (analyze, buffers, format json) ${text}`,
        params,
      );
      const wall = performance.now() - t0;
      type Plan = {
        Triggers?: { 'Trigger Name': string; Time: number }[];
        'Execution Time': number;
      };
      const plan = (res[0]?.['QUERY PLAN'] as Plan[] | undefined)?.[0];
      if (!plan) throw new Error('no plan');
      return { wall, plan };
    };
    let total = 0;
    for (const step of STEPS) {
      while (total < step) {
        await insert(false);
        total += EMBED_BATCH;
      }
      const before = new Map(
        (await sql.query<{ rel: string; read: string; hit: string }>(STATIO)).map((r) => [r.rel, r]),
      );
      const triggers = new Map<string, number>();
      let wall = 0;
      let exec = 0;
      const walls: number[] = [];
      for (let i = 0; i < PROBE; i++) {
        const r = await insert(true);
        if (!r) continue;
        wall += r.wall;
        walls.push(r.wall);
        exec += r.plan['Execution Time'];
        for (const t of r.plan.Triggers ?? [])
          triggers.set(t['Trigger Name'], (triggers.get(t['Trigger Name']) ?? 0) + t.Time);
      }
      total += PROBE * EMBED_BATCH;
      const after = await sql.query<{ rel: string; read: string; hit: string }>(STATIO);
      const per = (x: number) => (x / (PROBE * EMBED_BATCH)).toFixed(3);
      walls.sort((a, b) => a - b);
      console.log(
        `\n${name}, ${step} chunks in the table: ${per(wall)} ms a chunk (statement wall, median batch ${walls[Math.floor(walls.length / 2)]?.toFixed(1)} ms, max ${walls.at(-1)?.toFixed(1)} ms), executor ${per(exec)} ms`,
      );
      for (const [t, ms] of triggers) console.log(`  trigger ${t}: ${per(ms)} ms a chunk`);
      for (const a of after) {
        const b = before.get(a.rel);
        const read = Number(a.read) - Number(b?.read ?? 0);
        const hit = Number(a.hit) - Number(b?.hit ?? 0);
        if (read + hit > 0) console.log(`  ${a.rel}: ${per(hit)} blocks hit, ${per(read)} read a chunk`);
      }
      const sizes = await sql.query<{ rel: string; mb: string }>(
        `select c.relname as rel, round(pg_relation_size(c.oid) / 1048576.0, 1)::text as mb from pg_class c
         where c.relname like 'rag_chunks%' or c.relname like 'rag_lexeme_df%' order by 1`,
      );
      console.log(`  sizes (MB): ${sizes.map((s) => `${s.rel} ${s.mb}`).join(', ')}`);
      const dead = await sql.query<{ rel: string; live: string; dead: string; vac: string | null }>(
        `select relname as rel, n_live_tup::text as live, n_dead_tup::text as dead,
                coalesce(last_autovacuum, last_vacuum)::text as vac from pg_stat_user_tables where relname like 'rag_%' order by 1`,
      );
      console.log(
        `  tuples: ${dead.map((d) => `${d.rel} live ${d.live} dead ${d.dead} vacuumed ${d.vac ?? 'never'}`).join('; ')}`,
      );
    }
  } finally {
    await server.close();
    await db?.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

function pgVersionNote(rows: { v: string }[]): string {
  return (rows[0]?.v ?? '').split(' ').slice(0, 2).join(' ');
}

for (const name of DATABASES) await runDatabase(name);
