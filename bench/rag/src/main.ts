/**
 * Document QA (issue 14, docs/rag.md, decision 0024), on the embedded database and on the
 * PostgreSQL server, in one command:
 *
 *   pnpm --filter @ai-suite/bench-rag bench
 *
 * Per database, one server (TypeScript sources, in this process) on the fake OpenAI-compatible
 * upstream (hashed bag-of-words embeddings), a person's session, then three sections:
 *
 * - `ingest`: each file uploaded through the SDK (streamed multipart, indexed by the service)
 *   to a fresh server in a process of its own (`startServerChild`), whose RSS is sampled (PGlite
 *   lives in it when embedded): generated 100 MB files (CSV, padded text), a 200-page PDF
 *   (pages/s) and a 50 MB CSV (MB/s, rows/s).
 * - `retrieval`: one workspace filled with 10k then 100k chunks through SQL (clustered random
 *   unit vectors of BENCH_DIMS dimensions, text from per-topic vocabularies), the HNSW index the
 *   service would create built after each load (pgvector), or the in-process index loaded by a
 *   first query (decision 0034, timed); then, per query, the service's retrieval stage
 *   (`fullTextStage` and `vectorStage` in parallel, then `fuse`, as `RagService.query` does)
 *   and the same two SQL statements bare on one `pg` connection, alternated; recall@10 of the
 *   vector stage against an exact search done in JS, at the service's `hnsw.ef_search` and at
 *   others (bare SQL).
 * - `quality`: four generated PDFs of 25 pages, each page stating facts about entities no other
 *   page names (but attributes every page shares); one question per page through
 *   `POST /rag/query`: hit@1 and hit@5 of the right (document, page).
 *
 * BENCH_DATABASES (`embedded,postgres`), BENCH_PG_URL (`postgres://postgres@127.0.0.1:5432/test`),
 * BENCH_SECTIONS (`ingest,retrieval,quality`), BENCH_SIZES (`10000,100000`), BENCH_DIMS (256),
 * BENCH_QUERIES (200), BENCH_EF (`40,100,200`), BENCH_PDF_PAGES (200), BENCH_CSV_MB (50),
 * BENCH_BIG_MB (100), BENCH_INGEST_DIMS (64: the fake's embedding size during uploads),
 * BENCH_VECTOR_INDEX (`auto`: the server's RAG_VECTOR_INDEX; `memory` puts PGlite on the
 * in-process index too), BENCH_BARE_EXACT (0: with the in-process index, the bare vector
 * statement, the exact cosine in SQL, is timed only when 1: 13 s a query at 100k).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AiSuite } from '@ai-suite/sdk';
import { startEmbeddedPostgres } from '@ai-suite/server';
import { startCommand } from '@ai-suite/server/start-command';
import {
  createServerDatabase,
  createTestSession,
  createTestWorkspace,
  type FakeOpenAI,
  fakeOpenAIEnv,
  startFakeOpenAI,
  startTestServerWithFakeModel,
  type TestDatabase,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { demoReply } from '@ai-suite/testkit';
import { vector } from '@electric-sql/pglite-pgvector';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import pg from 'pg';
// The service itself (not part of the server's public exports): its retrieval stages are timed.
import {
  FULL_TEXT_STATS_SQL,
  fuse,
  HNSW_EF_SEARCH,
  planFullText,
  rankFullTextSql,
  STAGE_CANDIDATES,
} from '../../../packages/server/src/domains/rag/retrieval.js';
import { RagService } from '../../../packages/server/src/domains/rag/service.js';
import { CSV_HEADER, csvRow, word as genWord, prng } from './generate.js';

const env = process.env;
const DATABASES = (env.BENCH_DATABASES ?? 'embedded,postgres').split(',');
const PG_URL = env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const SECTIONS = new Set((env.BENCH_SECTIONS ?? 'ingest,retrieval,quality').split(','));
const SIZES = (env.BENCH_SIZES ?? '10000,100000').split(',').map(Number);
const DIMS = Number(env.BENCH_DIMS ?? 256);
const QUERIES = Number(env.BENCH_QUERIES ?? 200);
const EFS = (env.BENCH_EF ?? '40,100,200').split(',').map(Number);
const PDF_PAGES = Number(env.BENCH_PDF_PAGES ?? 200);
const CSV_MB = Number(env.BENCH_CSV_MB ?? 50);
const BIG_MB = Number(env.BENCH_BIG_MB ?? 100);
const INGEST_DIMS = Number(env.BENCH_INGEST_DIMS ?? 64);
/** `csv`: rows like the 50 MB file; `padded`: one sentence a megabyte padded with spaces (streamed, cheap to index). */
const BIG_KINDS = (env.BENCH_BIG_KIND ?? 'csv,padded').split(',');
const VECTOR_INDEX = env.BENCH_VECTOR_INDEX ?? 'auto';
const BARE_EXACT = env.BENCH_BARE_EXACT === '1';
const MB = 1024 * 1024;
const here = path.dirname(fileURLToPath(import.meta.url));
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-rag-'));

const load = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' / ');
const log = (line: string) => console.log(line);
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] ?? Number.NaN;
};
const ms = (n: number) => n.toFixed(1);

// ---------- deterministic generators ----------

/** Reseeded at the start of each section, so a section's data does not depend on the sections run before it. */
let rand = prng(14);
const pick = <T>(xs: readonly T[]) => xs[Math.floor(rand() * xs.length)] as T;
const gauss = () => Math.sqrt(-2 * Math.log(rand() || 1e-12)) * Math.cos(2 * Math.PI * rand());

const word = () => genWord(rand);
const COMMON = Array.from({ length: 2000 }, word);
const TOPICS = 500;
const TOPIC_WORDS = Array.from({ length: TOPICS }, () => Array.from({ length: 30 }, word));

function unitVec(v: Float32Array): Float32Array {
  let n = 0;
  for (const x of v) n += x * x;
  n = Math.sqrt(n) || 1;
  for (let i = 0; i < v.length; i++) v[i] = (v[i] as number) / n;
  return v;
}
function noisy(base: Float32Array, amount: number): Float32Array {
  const g = unitVec(Float32Array.from({ length: base.length }, gauss));
  return unitVec(Float32Array.from(base, (x, i) => x + amount * (g[i] as number)));
}
const CENTERS = Array.from({ length: TOPICS }, () => unitVec(Float32Array.from({ length: DIMS }, gauss)));

interface GenChunk {
  topic: number;
  words: string[];
  vec: Float32Array;
}
function genChunk(): GenChunk {
  const topic = Math.floor(rand() * TOPICS);
  const words: string[] = [];
  for (let i = 0; i < 40; i++) words.push(i % 3 === 0 ? pick(TOPIC_WORDS[topic] as string[]) : pick(COMMON));
  return { topic, words, vec: noisy(CENTERS[topic] as Float32Array, 0.8) };
}
const literal = (v: Float32Array, open = '{', close = '}') =>
  `${open}${Array.from(v, (x) => x.toFixed(6)).join(',')}${close}`;

// ---------- databases and server ----------

async function database(kind: string): Promise<TestDatabase> {
  if (kind === 'embedded') {
    const embedded = await startEmbeddedPostgres({ extensions: { vector } });
    return { embedded, drop: () => embedded.close() };
  }
  return createServerDatabase(PG_URL, 'aisuite_bench_rag');
}

interface Bare {
  query<R = any>(sql: string, params?: unknown[]): Promise<{ rows: R[] }>;
  end(): Promise<void>;
}

/**
 * SQL without the service: on the PostgreSQL server a `pg` connection of its own; on PGlite the
 * database's session directly (`EmbeddedPostgres.query`, a message to the thread PGlite runs
 * in; a second `pg` connection through its socket would share its single backend with the
 * server's pool, and interleaved extended-protocol messages of two clients break each other's
 * unnamed statements). So on PGlite the bare figure has no socket and no driver in it: the
 * service ÷ bare ratio overstates the service's own overhead there.
 */
async function bareClient(db: TestDatabase): Promise<Bare> {
  if (db.embedded) {
    const lite = db.embedded;
    return {
      query: async (sql, params) => ({ rows: (await lite.query(sql, params)).rows as never[] }),
      end: async () => {},
    };
  }
  const c = new pg.Client({ connectionString: db.databaseUrl });
  await c.connect();
  return c as unknown as Bare;
}

interface Ctx {
  kind: string;
  ts: TestServer;
  db: TestDatabase;
}

// ---------- ingest ----------

/**
 * A CSV of about `mb` megabytes (whole rows only, never more than `maxBytes`, so a file meant
 * to sit under the upload limit is not cut inside a quoted field), streamed to disk (never in
 * memory); returns its rows.
 */
async function writeCsv(file: string, mb: number, maxBytes = Number.POSITIVE_INFINITY): Promise<number> {
  const out = fs.createWriteStream(file);
  out.write(CSV_HEADER);
  let bytes = Buffer.byteLength(CSV_HEADER);
  let rows = 0;
  let full = false;
  while (bytes < mb * MB && !full) {
    let block = '';
    for (let i = 0; i < 1000; i++) {
      const row = csvRow(rows + 1, rand, COMMON);
      const len = Buffer.byteLength(row);
      if (bytes + len > maxBytes) {
        full = true;
        break;
      }
      rows++;
      bytes += len;
      block += row;
    }
    if (!out.write(block)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((r, j) => out.end((err?: Error | null) => (err ? j(err) : r())));
  return rows;
}

/** `mb` megabytes of text: a sentence a megabyte padded with spaces (as upload-memory.test.ts). */
async function writePadded(file: string, mb: number): Promise<number> {
  const out = fs.createWriteStream(file);
  const spaces = Buffer.alloc(MB, 0x20);
  for (let i = 0; i < mb; i++) {
    const line = Buffer.from(`Lighthouse log entry ${i} records calm seas. `);
    out.write(line);
    if (!out.write(spaces.subarray(0, MB - line.length - (i === mb - 1 ? 1 : 0))))
      await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((r, j) => out.end((err?: Error | null) => (err ? j(err) : r())));
  return mb;
}

async function buildPdf(pages: string[]): Promise<Uint8Array> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  for (const text of pages) {
    const page = doc.addPage([612, 792]);
    const lines: string[] = [];
    let line = '';
    for (const w of text.split(/\s+/)) {
      if (line && line.length + w.length + 1 > 95) {
        lines.push(line);
        line = w;
      } else line = line ? `${line} ${w}` : w;
    }
    if (line) lines.push(line);
    lines.slice(0, 60).forEach((l, i) => {
      page.drawText(l, { x: 40, y: 752 - i * 12, size: 10, font });
    });
  }
  return doc.save();
}

const sentence = () => {
  const ws = Array.from({ length: 8 + Math.floor(rand() * 8) }, () => pick(COMMON));
  ws[0] = (ws[0] as string).replace(/^./, (c) => c.toUpperCase());
  return `${ws.join(' ')}.`;
};
const prose = (chars: number) => {
  let t = '';
  while (t.length < chars) t += `${sentence()} `;
  return t.trim();
};

// ---------- the ingest server: a child process ----------

interface MemReport {
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  /** PGlite's WASM linear memory (0 on the PostgreSQL server). */
  wasm: number;
}

interface Child {
  proc: ChildProcess;
  pid: number;
  url: string;
  client: AiSuite;
  ask<T>(type: string): Promise<T>;
  close(): Promise<void>;
}

/**
 * The node flags and `MALLOC_ARENA_MAX` `pnpm start` gives the server on a database of this
 * kind (its start script, expanded); BENCH_SERVER_NODE_ARGS replaces the flags.
 */
function startSettings(kind: string): { nodeArgs: string[]; env: Record<string, string> } {
  const start = startCommand({
    DATABASE_URL: kind === 'embedded' ? undefined : PG_URL,
    MALLOC_ARENA_MAX: env.MALLOC_ARENA_MAX,
  });
  const flags = env.BENCH_SERVER_NODE_ARGS;
  return {
    nodeArgs: flags === undefined ? start.nodeArgs : flags.split(' ').filter(Boolean),
    env: start.env,
  };
}

/**
 * The server in a process of its own (`server.ts`, the built dist), configured like
 * `pnpm start` (environment, node flags, `MALLOC_ARENA_MAX`) plus `--expose-gc`, on a
 * fresh database: a data directory of its own (PGlite then lives in the child) or a new
 * database on the PostgreSQL server. A person signs in through the API (INIT_USER_*).
 */
async function startServerChild(kind: string, fake: FakeOpenAI): Promise<Child> {
  const dataDir = fs.mkdtempSync(path.join(TMP, 'data-'));
  const db = kind === 'embedded' ? undefined : await createServerDatabase(PG_URL, 'aisuite_bench_rag');
  const email = 'bench@example.com';
  const password = `pw-${randomUUID()}`;
  const start = startSettings(kind);
  const proc = fork(path.join(here, 'server.ts'), [], {
    env: {
      ...process.env,
      ...fakeOpenAIEnv(fake),
      LOG_LEVEL: 'silent',
      ...start.env,
      DATA_DIR: dataDir,
      DATABASE_URL: db?.databaseUrl ?? '',
      RAG_VECTOR_INDEX: VECTOR_INDEX,
      INIT_WORKSPACE_NAME: 'bench',
      INIT_USER_EMAIL: email,
      INIT_USER_PASSWORD: password,
      INIT_CREDITS_USD: '1000',
    },
    execArgv: ['--import', 'tsx', '--expose-gc', ...start.nodeArgs],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const cleanup = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      if (proc.connected) proc.disconnect();
      const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    }
    await db?.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  };
  let ready: { url: string; pid: number };
  try {
    ready = await new Promise((resolve, reject) => {
      proc.once('error', reject);
      proc.once('exit', (code) => reject(new Error(`server.ts exited with ${code}`)));
      proc.on('message', (m: { type: string; url: string; pid: number }) => {
        if (m.type === 'ready') resolve(m);
      });
    });
  } catch (err) {
    await cleanup();
    throw err;
  }
  const client = new AiSuite({ baseURL: ready.url, timeout: 3_600_000, fetch: patientFetch });
  await client.auth.signIn({ email, password });
  return {
    proc,
    pid: ready.pid,
    url: ready.url,
    client,
    ask: <T>(type: string) =>
      new Promise<T>((resolve) => {
        const on = (m: { type: string }) => {
          if (m.type !== type) return;
          proc.off('message', on);
          resolve(m as T);
        };
        proc.on('message', on);
        proc.send({ type });
      }),
    close: cleanup,
  };
}

const UNDICI_DISPATCHER = Symbol.for('undici.globalDispatcher.1');
let patientDispatcher: unknown;
/**
 * `fetch` without undici's 300 s wait for response headers: an upload indexed within its request
 * can take longer than that on PGlite (a 100 MB CSV), and the SDK's `timeout` does not lift
 * undici's own. Node bundles undici without exporting its `Agent`: one is made with the
 * constructor of the global dispatcher, which exists once a first `fetch` has run (the sign-in).
 */
const patientFetch: typeof fetch = (input, init) => {
  const global = (
    globalThis as unknown as Record<symbol, { constructor: new (o: object) => unknown } | undefined>
  )[UNDICI_DISPATCHER];
  if (!patientDispatcher && global)
    patientDispatcher = new global.constructor({ headersTimeout: 0, bodyTimeout: 0 });
  return fetch(input, {
    ...init,
    ...(patientDispatcher ? { dispatcher: patientDispatcher } : {}),
  } as RequestInit);
};

/** VmRSS and VmHWM of a process, in bytes, from /proc (independent of its event loop). */
function procRss(pid: number): { rss: number; hwm: number } {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? Number.NaN) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

/** Resets the kernel's peak RSS (VmHWM) of a process of ours to its current RSS. */
function resetHwm(pid: number): boolean {
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

// ---------- ingest ----------

/** Uploads, then waits until the document is indexed (in the request, or after it when indexing runs in the background). */
async function uploadTimed(client: AiSuite, file: Parameters<AiSuite['rag']['upload']>[0][number]) {
  const t0 = performance.now();
  const up = await client.rag.upload([file]);
  const detail = up.results.details[0];
  if (detail?.status !== 'completed' || !detail.documentId)
    throw new Error(`upload failed: ${JSON.stringify(detail)}`);
  let doc = (await client.rag.documents.list()).documents.find((d) => d.id === detail.documentId);
  while (doc && (doc.status === 'queued' || doc.status === 'processing')) {
    await new Promise((r) => setTimeout(r, 200));
    doc = (await client.rag.documents.list()).documents.find((d) => d.id === detail.documentId);
  }
  if (doc?.status !== 'ready') throw new Error(`indexing failed: ${doc?.error}`);
  return { seconds: (performance.now() - t0) / 1000, chunks: doc.chunks };
}

interface IngestFile {
  label: string;
  /** A path (streamed by the SDK) or bytes. */
  file: Parameters<AiSuite['rag']['upload']>[0][number];
  bytes: number;
  /** The throughput column, from the indexing time. */
  rate: (seconds: number) => string;
  /** A small file of the same kind, uploaded first so its code paths are loaded before the baseline. */
  warmUp: Parameters<AiSuite['rag']['upload']>[0][number];
}

const mb = (n: number) => (n / MB).toFixed(0);

/**
 * One file on a fresh server process: warm-up upload of the same kind, GC, baseline RSS
 * (median of 10 readings over 200 ms), then the upload and its indexing with the server's
 * VmRSS read from /proc every 10 ms (and VmHWM, the kernel's own peak, reset at the baseline),
 * the server's `process.memoryUsage()` polled every 250 ms over IPC (the breakdown at its
 * highest RSS reading, and each part's highest), then, 2 s after indexing and a GC, the RSS
 * the server keeps.
 */
async function ingestOne(kind: string, fake: FakeOpenAI, f: IngestFile) {
  const child = await startServerChild(kind, fake);
  try {
    await uploadTimed(child.client, f.warmUp);
    await child.ask('gc');
    await new Promise((r) => setTimeout(r, 1000));
    const readings: number[] = [];
    for (let i = 0; i < 10; i++) {
      readings.push(procRss(child.pid).rss);
      await new Promise((r) => setTimeout(r, 20));
    }
    const base = pct(readings, 50);
    const baseMem = await child.ask<MemReport>('mem');
    const hwmReset = resetHwm(child.pid);
    let peak = base;
    const sampler = setInterval(() => {
      try {
        peak = Math.max(peak, procRss(child.pid).rss);
      } catch {
        /* exited: the upload fails below */
      }
    }, 10);
    let atPeak = baseMem;
    const highest = { ...baseMem };
    let polling = false;
    const poller = setInterval(() => {
      if (polling) return;
      polling = true;
      void child
        .ask<MemReport>('mem')
        .then((m) => {
          if (m.rss > atPeak.rss) atPeak = m;
          for (const k of Object.keys(highest) as (keyof MemReport)[])
            highest[k] = Math.max(highest[k], m[k]);
        })
        .finally(() => {
          polling = false;
        });
    }, 250);
    let r: Awaited<ReturnType<typeof uploadTimed>>;
    try {
      r = await uploadTimed(child.client, f.file);
    } finally {
      clearInterval(sampler);
      clearInterval(poller);
    }
    const end = procRss(child.pid);
    peak = Math.max(peak, end.rss);
    const hwm = hwmReset ? end.hwm : Number.NaN;
    await new Promise((res) => setTimeout(res, 2000));
    const after = (await child.ask<MemReport>('gc')).rss;
    const peakAll = Math.max(peak, Number.isFinite(hwm) ? hwm : 0);
    log(
      `| ${f.label} | ${(f.bytes / MB).toFixed(1)} MB | ${r.seconds.toFixed(1)} s | ${f.rate(r.seconds)} | ${r.chunks} | ${mb(base)} MB | ${mb(peak)} MB${Number.isFinite(hwm) ? ` (HWM ${mb(hwm)})` : ''} | **${mb(peakAll - base)} MB** | ${mb(after)} MB |`,
    );
    const part = (m: MemReport) =>
      `rss ${mb(m.rss)}, heap ${mb(m.heapUsed)}/${mb(m.heapTotal)}, external ${mb(m.external)} (arrayBuffers ${mb(m.arrayBuffers)}), WASM ${mb(m.wasm)}`;
    const breakdown = `${f.label}: baseline ${part(baseMem)}; at the highest polled RSS ${part(atPeak)}; highest of each: heap used ${mb(highest.heapUsed)}, heap total ${mb(highest.heapTotal)}, external ${mb(highest.external)}, arrayBuffers ${mb(highest.arrayBuffers)}, WASM ${mb(highest.wasm)} (MB)`;
    breakdowns.push(breakdown);
    // At once on stderr too (the list follows the table): a long run stopped early keeps it.
    console.error(`memory: ${breakdown}`);
  } finally {
    await child.close();
  }
}

let breakdowns: string[] = [];

async function ingest(kind: string) {
  rand = prng(1401);
  const name = kind === 'embedded' ? 'PGlite' : 'PostgreSQL';
  log(
    `\n### ${name}: ingest, the server in a process of its own (load average ${load()})\n\nRSS of the server process (PGlite included when embedded), each file on a fresh server after a warm-up upload of its kind.\n`,
  );
  log(
    '| file | size | indexed in | throughput | chunks | baseline RSS | peak RSS | peak growth | RSS after (GC) |',
  );
  log(
    '| ---- | ---- | ---------- | ---------- | ------ | ------------ | -------- | ----------- | -------------- |',
  );
  breakdowns = [];
  const fake = await startFakeOpenAI({ embeddingDimensions: INGEST_DIMS, defaultReply: demoReply });
  try {
    const smallCsv = path.join(TMP, 'warm.csv');
    await writeCsv(smallCsv, 1);
    const smallTxt = path.join(TMP, 'warm.txt');
    await writePadded(smallTxt, 1);
    const files: (() => Promise<IngestFile>)[] = [];
    // The 100 MB files (BENCH_BIG_MB=0 skips them).
    for (const bigKind of BIG_MB > 0 ? BIG_KINDS : []) {
      files.push(async () => {
        const big = path.join(TMP, bigKind === 'padded' ? 'big.txt' : 'big.csv');
        // Under the 100 MB limit: the CSV stops at the last whole row that fits.
        const n =
          bigKind === 'padded' ? await writePadded(big, BIG_MB) : await writeCsv(big, BIG_MB, 100 * MB - 1);
        const bytes = fs.statSync(big).size;
        return {
          label: bigKind === 'padded' ? `text, ${n} sentences padded with spaces` : `CSV, ${n} rows`,
          file: big,
          bytes,
          rate: (s) => `${(bytes / MB / s).toFixed(2)} MB/s`,
          warmUp: bigKind === 'padded' ? smallTxt : smallCsv,
        };
      });
    }
    // The 200-page PDF: about 1,900 characters of prose a page (two chunks).
    files.push(async () => {
      const pages = Array.from({ length: PDF_PAGES }, (_, i) => `Page ${i + 1}. ${prose(1900)}`);
      const pdf = await buildPdf(pages);
      const warm = await buildPdf(pages.slice(0, 2));
      return {
        label: `PDF, ${PDF_PAGES} pages`,
        file: { name: 'manual.pdf', content: pdf },
        bytes: pdf.length,
        rate: (s) => `${(PDF_PAGES / s).toFixed(1)} pages/s`,
        warmUp: { name: 'warm.pdf', content: warm },
      };
    });
    files.push(async () => {
      const csv = path.join(TMP, 'prices.csv');
      const rows = await writeCsv(csv, CSV_MB);
      const bytes = fs.statSync(csv).size;
      return {
        label: `CSV, ${rows} rows`,
        file: csv,
        bytes,
        rate: (s) => `${(bytes / MB / s).toFixed(2)} MB/s, ${(rows / s).toFixed(0)} rows/s`,
        warmUp: smallCsv,
      };
    });
    for (const make of files) {
      const f = await make();
      try {
        await ingestOne(kind, fake, f);
      } finally {
        if (typeof f.file === 'string') fs.rmSync(f.file, { force: true });
      }
    }
    fs.rmSync(smallCsv, { force: true });
    fs.rmSync(smallTxt, { force: true });
  } finally {
    await fake.close();
  }
  log('\nMemory of the server process by part (`process.memoryUsage()` polled every 250 ms, MB):\n');
  for (const b of breakdowns) log(`- ${b}`);
  log(`\nload average after: ${load()}`);
}

// ---------- retrieval ----------

/** `?` placeholders as `$1`, `$2`… */
const numbered = (sql: string) => {
  let i = 0;
  return sql.replace(/\?/g, () => `$${++i}`);
};

/**
 * The full-text stage's two statements bare (decision 0033): the question's lexeme
 * frequencies, then the ranking of the candidates the plan selects (same SQL as the service).
 */
async function bareFullText(c: Bare, text: string, workspaceId: string) {
  const stats = await c.query<{ lexeme: string; df: number | null; n: number | null }>(
    numbered(FULL_TEXT_STATS_SQL),
    [text, workspaceId, workspaceId],
  );
  const plan = planFullText(
    stats.rows.map((r) => ({ lexeme: r.lexeme, df: Number(r.df ?? 0) })),
    Number(stats.rows[0]?.n ?? 0),
  );
  const ranked = rankFullTextSql(workspaceId, plan, STAGE_CANDIDATES);
  return ranked
    ? (await c.query<{ id: string; score: number }>(numbered(ranked.sql), ranked.params)).rows
    : [];
}

/** The full-text statement before decision 0033 (`ts_rank_cd` over every match), for comparison. */
const FTS_TSRANK_SQL = `with q as (select (select string_agg('''' || replace(replace(l, '\\', '\\\\'), '''', '''''') || '''', ' | ')
  from unnest(tsvector_to_array(to_tsvector('english'::regconfig, $1))) as l)::tsquery as q)
  select c.id::text as id, ts_rank_cd(c.tsv, q.q) as score
  from rag_chunks c, q
  where q.q is not null and c.workspace_id = $2 and c.tsv @@ q.q
  order by score desc, c.id
  limit $3`;
const HNSW_SQL = `select id::text as id, 1 - (embedding::vector(${DIMS}) <=> $1::vector(${DIMS})) as similarity
  from rag_chunks where workspace_id = $2 and dims = ${DIMS}
  order by embedding::vector(${DIMS}) <=> $1::vector(${DIMS})
  limit $3`;
const EXACT_SQL = `select c.id::text as id, (select sum(a * b) from unnest(c.embedding, $1::real[]) as t(a, b)) as similarity
  from rag_chunks c where c.workspace_id = $2 and c.dims = $3
  order by similarity desc, c.id
  limit $4`;
const INDEX_SQL = `create index if not exists rag_chunks_hnsw_${DIMS} on rag_chunks using hnsw ((embedding::vector(${DIMS})) vector_cosine_ops) where dims = ${DIMS}`;

/** Inserts as literal rows (generated words and numbers only: nothing to escape), 500 a statement. */
async function insertChunks(
  c: Bare,
  workspaceId: string,
  documentId: string,
  chunks: GenChunk[],
  from: number,
) {
  const B = 500;
  for (let s = 0; s < chunks.length; s += B) {
    const values = chunks
      .slice(s, s + B)
      .map(
        (ch, k) =>
          `('${documentId}', '${workspaceId}', ${from + s + k}, 1, '${ch.words.join(' ')}', '${literal(ch.vec)}'::real[], ${DIMS})`,
      )
      .join(',\n');
    await c.query(
      `insert into rag_chunks (document_id, workspace_id, chunk_index, page, content, embedding, dims) values ${values}`,
    );
  }
}

/** Ids of the exact top 10 by cosine, and the 10th similarity (for tie-aware recall). */
function exactTop(all: Float32Array[], q: Float32Array, k = 10): { idx: number[]; kth: number } {
  const best: { i: number; s: number }[] = [];
  for (let i = 0; i < all.length; i++) {
    const v = all[i] as Float32Array;
    let s = 0;
    for (let d = 0; d < q.length; d++) s += (v[d] as number) * (q[d] as number);
    if (best.length < k || s > (best.at(-1) as { s: number }).s) {
      best.push({ i, s });
      best.sort((a, b) => b.s - a.s);
      if (best.length > k) best.pop();
    }
  }
  return { idx: best.map((b) => b.i), kth: (best.at(-1) as { s: number }).s };
}

async function retrieval(ctx: Ctx) {
  rand = prng(1400);
  log(`\n### ${ctx.kind}: retrieval, ${DIMS} dimensions (load average ${load()})\n`);
  const svc = new RagService(ctx.ts.server.deps);
  const mode = await svc.vectorMode();
  const ws = await createTestWorkspace(ctx.ts, { creditsUsd: '1' });
  await svc.provision(ws.workspaceId);
  const c = await bareClient(ctx.db);
  const documentId = randomUUID();
  await c.query(
    `insert into rag_documents (id, workspace_id, name, mime_type, status) values ($1, $2, 'bench.txt', 'text/plain', 'ready')`,
    [documentId, ws.workspaceId],
  );
  const all: GenChunk[] = [];
  const header = () => {
    log(
      '\n| chunks | vector stage | service p50 ms | service p95 ms | bare p50 ms | bare p95 ms | bare p50 full text / vector | service ÷ bare p50 / p95 | recall@10 |',
    );
    log(
      '| ------ | ------------ | -------------- | -------------- | ----------- | ----------- | --------------------------- | ------------------------ | --------- |',
    );
  };
  for (const size of SIZES) {
    const t0 = performance.now();
    const add = Array.from({ length: size - all.length }, genChunk);
    if (mode === 'pgvector') await c.query(`drop index if exists rag_chunks_hnsw_${DIMS}`);
    // Bulk load without the full-text GIN index (rebuilt once after: far cheaper than 100k
    // incremental GIN insertions, the bulk of the load time on PGlite).
    await c.query('drop index if exists rag_chunks_tsv_idx');
    await insertChunks(c, ws.workspaceId, documentId, add, all.length);
    await c.query(`set maintenance_work_mem = '512MB'`);
    await c.query('create index rag_chunks_tsv_idx on rag_chunks using gin (tsv)');
    all.push(...add);
    const loadS = (performance.now() - t0) / 1000;
    let buildS = 0;
    if (mode === 'pgvector') {
      const t1 = performance.now();
      // pgvector builds fastest when the graph fits in maintenance_work_mem (~100k x 256 float4
      // vectors + links ≈ 150 MB): 512 MB holds it, and PGlite's WASM heap (up to 2 GB) too.
      await c.query(`set maintenance_work_mem = '512MB'`);
      await c.query(INDEX_SQL);
      buildS = (performance.now() - t1) / 1000;
    }
    await c.query('analyze rag_chunks');
    let firstQueryS = 0;
    if (mode === 'memory') {
      // The in-process index: loaded (or, after the first size, extended) by the first query.
      const t1 = performance.now();
      await svc.vectorStage(ws.workspaceId, Array.from(unitVec(noisy(all[0]?.vec as Float32Array, 0.5))));
      firstQueryS = (performance.now() - t1) / 1000;
    }
    log(
      `${size} chunks: loaded in ${loadS.toFixed(1)} s${mode === 'pgvector' ? `, HNSW built in ${buildS.toFixed(1)} s` : ''}${mode === 'memory' ? `, first query (loads the in-process index: ${JSON.stringify(svc.vectorIndex().info())}) ${firstQueryS.toFixed(2)} s` : ''} (load average ${load()})`,
    );
    const idOf = new Map<string, number>(
      (
        await c.query<{ id: string; i: number }>(
          'select id::text as id, chunk_index as i from rag_chunks where workspace_id = $1',
          [ws.workspaceId],
        )
      ).rows.map((r) => [r.id, r.i]),
    );
    const vecs = all.map((ch) => ch.vec);

    // Questions: a few words of a chunk, and a vector near that chunk's.
    const queries = Array.from({ length: QUERIES }, () => {
      const ch = all[Math.floor(rand() * all.length)] as GenChunk;
      const words = [...ch.words.filter((_, k) => k % 3 === 0).slice(0, 4), pick(ch.words), pick(ch.words)];
      return { text: `Which ${words.join(' ')}?`, vec: noisy(ch.vec, 0.5) };
    });
    if (mode === 'pgvector') {
      await c.query(`set hnsw.ef_search = ${HNSW_EF_SEARCH}`);
      await c.query(`set hnsw.iterative_scan = relaxed_order`);
    }
    // With the in-process index there is no SQL vector statement to compare with: the bare
    // figure is the full-text statement alone unless BENCH_BARE_EXACT=1 (the old exact scan).
    const bareVector = (q: Float32Array) =>
      mode === 'pgvector'
        ? c.query(HNSW_SQL, [literal(q, '[', ']'), ws.workspaceId, STAGE_CANDIDATES])
        : mode === 'memory' && !BARE_EXACT
          ? Promise.resolve({ rows: [] })
          : c.query(EXACT_SQL, [literal(q), ws.workspaceId, DIMS, STAGE_CANDIDATES]);
    const vectorLabel =
      mode === 'pgvector'
        ? `HNSW, ef_search ${HNSW_EF_SEARCH}`
        : mode === 'memory'
          ? `in-process index (exact)${BARE_EXACT ? '' : '; bare = full text only'}`
          : 'exact cosine in SQL';
    const service = async (q: { text: string; vec: Float32Array }) => {
      const [fts, vec] = await Promise.all([
        svc.fullTextStage(ws.workspaceId, q.text),
        svc.vectorStage(ws.workspaceId, Array.from(q.vec)),
      ]);
      return { fused: fuse(fts, vec), vec };
    };
    // Warm-up: caches, plans, the JIT.
    for (const q of queries.slice(0, 10)) {
      await service(q);
      await bareFullText(c, q.text, ws.workspaceId);
      await bareVector(q.vec);
    }
    const svcMs: number[] = [];
    const bareMs: number[] = [];
    const ftsMs: number[] = [];
    const vecMs: number[] = [];
    const stageMs: number[] = [];
    let recallSum = 0;
    for (const q of queries) {
      const t0q = performance.now();
      await svc.vectorStage(ws.workspaceId, Array.from(q.vec));
      stageMs.push(performance.now() - t0q);
      const t1 = performance.now();
      const { vec } = await service(q);
      svcMs.push(performance.now() - t1);
      const t2 = performance.now();
      await bareFullText(c, q.text, ws.workspaceId);
      const t3 = performance.now();
      await bareVector(q.vec);
      const t4 = performance.now();
      ftsMs.push(t3 - t2);
      vecMs.push(t4 - t3);
      bareMs.push(t4 - t2);
      const exact = exactTop(vecs, q.vec);
      const got = vec.slice(0, 10);
      // Tie-aware: a returned chunk as similar as the exact 10th counts.
      recallSum +=
        got.filter((g) => exact.idx.includes(idOf.get(g.id) ?? -1) || g.similarity >= exact.kth - 1e-5)
          .length / 10;
    }
    header();
    log(
      `| ${size.toLocaleString('en')} | ${vectorLabel} | ${ms(pct(svcMs, 50))} | ${ms(pct(svcMs, 95))} | ${ms(pct(bareMs, 50))} | ${ms(pct(bareMs, 95))} | ${ms(pct(ftsMs, 50))} / ${ms(pct(vecMs, 50))} | ${(pct(svcMs, 50) / pct(bareMs, 50)).toFixed(2)}× / ${(pct(svcMs, 95) / pct(bareMs, 95)).toFixed(2)}× | ${(recallSum / queries.length).toFixed(3)} |`,
    );

    log(
      `\nvector stage alone (service, ${mode}): p50 ${ms(pct(stageMs, 50))} ms, p95 ${ms(pct(stageMs, 95))} ms${mode === 'memory' ? `; longest synchronous scoring slice (event loop held) ${ms(svc.vectorIndex().info().longestSliceMs)} ms` : ''} (load average ${load()})`,
    );

    // Recall at other ef_search values, bare SQL (the service's constant is fixed).
    if (mode === 'pgvector') {
      log('\n| chunks | ef_search | recall@10 | vector query p50 ms | p95 ms |');
      log('| ------ | --------- | --------- | ------------------- | ------ |');
      for (const ef of EFS) {
        await c.query(`set hnsw.ef_search = ${ef}`);
        let rs = 0;
        const t: number[] = [];
        for (const q of queries) {
          const t1 = performance.now();
          const res = await bareVector(q.vec);
          t.push(performance.now() - t1);
          const exact = exactTop(vecs, q.vec);
          const got = res.rows
            .map((r: { id: string; similarity: number }) => ({ id: r.id, similarity: Number(r.similarity) }))
            .sort((a, b) => b.similarity - a.similarity)
            .slice(0, 10);
          rs +=
            got.filter((g) => exact.idx.includes(idOf.get(g.id) ?? -1) || g.similarity >= exact.kth - 1e-5)
              .length / 10;
        }
        log(
          `| ${size.toLocaleString('en')} | ${ef} | ${(rs / queries.length).toFixed(3)} | ${ms(pct(t, 50))} | ${ms(pct(t, 95))} |`,
        );
      }
      await c.query(`set hnsw.ef_search = ${HNSW_EF_SEARCH}`);
      const plan = await c.query(
        `explain (costs off) ${HNSW_SQL.replace(
          /\$1/g,
          `'${literal(queries[0]?.vec as Float32Array, '[', ']')}'`,
        )
          .replace('$2', `'${ws.workspaceId}'`)
          .replace('$3', String(STAGE_CANDIDATES))}`,
      );
      log(
        `plan of the vector stage at ${size}: ${plan.rows
          .map((r: Record<string, string>) =>
            String(Object.values(r)[0])
              .replace(/'\[[^\]]*\]'/g, 'q')
              .trim(),
          )
          .join(' | ')}`,
      );
    }
  }
  await c.end();
  log(`\nload average after: ${load()}`);
}

// ---------- answer quality ----------

const ATTRIBUTES = [
  ['maximum load', 'kilograms'],
  ['service interval', 'hours'],
  ['operating temperature', 'degrees'],
  ['warranty period', 'months'],
  ['noise level', 'decibels'],
] as const;

/**
 * The full-text statement with the chunks matching more of the question's distinct lexemes
 * first, then `ts_rank_cd` (which has no notion of a term's rarity): a candidate change,
 * measured here only.
 */
const FTS_COVERAGE_SQL = `with q as (select array(select unnest(tsvector_to_array(to_tsvector('english'::regconfig, $1)))) as lx,
    (select string_agg('''' || replace(replace(l, '\\', '\\\\'), '''', '''''') || '''', ' | ')
     from unnest(tsvector_to_array(to_tsvector('english'::regconfig, $1))) as l)::tsquery as q)
  select c.id::text as id, ts_rank_cd(c.tsv, q.q) as score,
    (select count(*) from unnest(tsvector_to_array(c.tsv)) as t(l) where t.l = any(q.lx)) as matched
  from rag_chunks c, q
  where q.q is not null and c.workspace_id = $2 and c.tsv @@ q.q
  order by matched desc, score desc, c.id
  limit $3`;

async function quality(ctx: Ctx) {
  rand = prng(1414);
  log(`\n### ${ctx.kind}: answer quality (load average ${load()})\n`);
  // A workspace of its own: only the fixture's documents.
  const ws = await createTestWorkspace(ctx.ts, { creditsUsd: '100' });
  const session = await createTestSession(ctx.ts, ws);
  const client = new AiSuite({ baseURL: ctx.ts.url, sessionToken: session.token, timeout: 600_000 });
  const facts: { doc: string; page: number; question: string }[] = [];
  const names = new Set<string>();
  const entity = () => {
    let n = '';
    do n = `${word()}${word()}`.replace(/^./, (c) => c.toUpperCase());
    while (names.has(n));
    names.add(n);
    return n;
  };
  for (let d = 1; d <= 4; d++) {
    const pages: string[] = [];
    for (let p = 1; p <= 25; p++) {
      // Three entities a page, each with an attribute every page shares; filler around them.
      const parts: string[] = [prose(300)];
      const asked = entity();
      const [attr, unit] = pick(ATTRIBUTES);
      parts.push(`The ${asked} unit has a ${attr} of ${10 + Math.floor(rand() * 900)} ${unit}.`);
      facts.push({
        doc: `catalogue-${d}.pdf`,
        page: p,
        question: `What is the ${attr} of the ${asked} unit?`,
      });
      for (let k = 0; k < 2; k++) {
        const [a, u] = pick(ATTRIBUTES);
        parts.push(`The ${entity()} unit has a ${a} of ${10 + Math.floor(rand() * 900)} ${u}.`);
      }
      parts.push(prose(400));
      pages.push(parts.join(' '));
    }
    await client.rag.upload([{ name: `catalogue-${d}.pdf`, content: await buildPdf(pages) }]);
  }
  const svc = new RagService(ctx.ts.server.deps);
  const model = svc.embeddingModel();
  const bare = await bareClient(ctx.db);
  const where = new Map<string, string>(
    (
      await bare.query<{ id: string; doc: string; page: number }>(
        'select c.id::text as id, d.name as doc, c.page from rag_chunks c join rag_documents d on d.id = c.document_id where c.workspace_id = $1',
        [ws.workspaceId],
      )
    ).rows.map((r) => [r.id, `${r.doc}#${r.page}`]),
  );
  const hits = {
    hit1: 0,
    hit5: 0,
    hit5Default: 0,
    answered: 0,
    fts: 0,
    ftsOld: 0,
    vec: 0,
    cov: 0,
    covFused: 0,
    oldFused: 0,
  };
  const top5 = (ids: { id: string }[], f: { doc: string; page: number }) =>
    ids.slice(0, 5).some((r) => where.get(r.id) === `${f.doc}#${f.page}`);
  for (const f of facts) {
    const { result } = await client.rag.query({
      query: f.question,
      options: { max_sources: 5, confidence_threshold: 0, include_metadata: false },
    });
    const at = result.sources.findIndex((s) => s.document === f.doc && s.page === f.page);
    if (at === 0) hits.hit1++;
    if (at >= 0) hits.hit5++;
    const def = await client.rag.query({ query: f.question, options: { include_metadata: false } });
    if (def.result.sources.some((s) => s.document === f.doc && s.page === f.page)) hits.hit5Default++;
    if (def.result.confidence > 0) hits.answered++;
    // Each stage alone, and the coverage-first full-text ranking (fused with the same vector stage).
    const fts = await svc.fullTextStage(ws.workspaceId, f.question);
    const qv = model ? (await ctx.ts.server.deps.llm.embed(model, [f.question])).vectors[0] : undefined;
    const vec = qv ? await svc.vectorStage(ws.workspaceId, qv) : undefined;
    const cov = (
      await bare.query<{ id: string; score: number }>(FTS_COVERAGE_SQL, [
        f.question,
        ws.workspaceId,
        STAGE_CANDIDATES,
      ])
    ).rows.map((r) => ({ id: r.id, score: Number(r.score) }));
    const old = (
      await bare.query<{ id: string; score: number }>(FTS_TSRANK_SQL, [
        f.question,
        ws.workspaceId,
        STAGE_CANDIDATES,
      ])
    ).rows.map((r) => ({ id: r.id, score: Number(r.score) }));
    if (top5(fts, f)) hits.fts++;
    if (top5(old, f)) hits.ftsOld++;
    if (top5(fuse(old, vec), f)) hits.oldFused++;
    if (vec && top5(vec, f)) hits.vec++;
    if (top5(cov, f)) hits.cov++;
    if (top5(fuse(cov, vec), f)) hits.covFused++;
  }
  await bare.end();
  const n = facts.length;
  const r = (x: number) => (x / n).toFixed(2);
  log('| questions | hit@1 | hit@5 | right page among the sources at the default 0.7 | answered at 0.7 |');
  log('| --------- | ----- | ----- | ----------------------------------------------- | --------------- |');
  log(`| ${n} | ${r(hits.hit1)} | ${r(hits.hit5)} | ${r(hits.hit5Default)} | ${r(hits.answered)} |`);
  log(
    "\nhit@5 of each stage alone (full text: the service's idf ranking, decision 0033), and of two other full-text rankings alone and fused with the same vector stage:\n",
  );
  log(
    '| full text (idf) | vector | ts_rank_cd (before 0033) | ts_rank_cd + vector | coverage first | coverage first + vector |',
  );
  log(
    '| --------------- | ------ | ------------------------ | ------------------- | -------------- | ----------------------- |',
  );
  log(
    `| ${r(hits.fts)} | ${r(hits.vec)} | ${r(hits.ftsOld)} | ${r(hits.oldFused)} | ${r(hits.cov)} | ${r(hits.covFused)} |`,
  );
}

// ---------- main ----------

log(`bench/rag: ${new Date().toISOString()}, ${os.cpus().length} CPUs, load average ${load()}`);
for (const kind of DATABASES) {
  log(`\n## ${kind === 'embedded' ? 'PGlite' : 'PostgreSQL'}`);
  // Ingest: the server in a child process (its RSS is the server's own).
  if (SECTIONS.has('ingest')) await ingest(kind);
  if (!SECTIONS.has('retrieval') && !SECTIONS.has('quality')) continue;
  // Retrieval and quality: the server in this process (they time its retrieval stages).
  const db = await database(kind);
  const ts = await startTestServerWithFakeModel({
    db,
    fake: { embeddingDimensions: INGEST_DIMS, defaultReply: demoReply },
    env: { RAG_VECTOR_INDEX: VECTOR_INDEX },
  });
  try {
    const ctx: Ctx = { kind: kind === 'embedded' ? 'PGlite' : 'PostgreSQL', ts, db };
    if (SECTIONS.has('retrieval')) await retrieval(ctx);
    if (SECTIONS.has('quality')) await quality(ctx);
  } finally {
    await ts.close();
    await db.drop();
  }
}
fs.rmSync(TMP, { recursive: true, force: true });
