/**
 * bench/ingest-isolation (issue 38, decision 0040): how much the indexing of the largest
 * legitimate documents of spec 4.12 (a 100 MB CSV, a 200-page PDF) holds the server's event
 * loop while `/chat` streams are being served, with extraction on the event loop
 * (`DOCUMENT_WORKERS=0`, what the service did before) and in the worker pool (the default).
 *
 * Per mode and file: a fresh server process (the build, `src/server.ts`) on a fresh database,
 * `BENCH_CHATS` (4) clients each streaming one `/chat` reply after another (the fake upstream
 * paces 40 chunks 25 ms apart), the file stored then indexed through
 * `POST /workspaces/{id}/storage/files/{fileId}/index`; measured from the index request to the
 * document `ready`: the server's event-loop delay (`monitorEventLoopDelay`, p50/p99/max), the
 * longest gap between two chunks of a `/chat` stream seen by the clients (p99 over streams,
 * max), and the ingest throughput.
 *
 * Environment: BENCH_DATABASES (`postgres`; `embedded` too: PGlite indexes a 100 MB CSV in
 * tens of minutes), BENCH_PG_URL (postgres://postgres@127.0.0.1:5432/test), BENCH_CSV_MB (100),
 * BENCH_PDF_PAGES (200), BENCH_MODES (`idle,main,pool`: `idle` = the /chat load alone for
 * BENCH_IDLE_MS, 60 s, the machine's noise floor), BENCH_CHATS (4).
 */
import { type ChildProcess, fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServerDatabase, type TestDatabase } from '@ai-suite/server/test-harness';
import { fakeOpenAIEnv, startFakeOpenAI } from '@ai-suite/testkit';
import { PDFDocument, StandardFonts } from 'pdf-lib';

const env = process.env;
const MB = 1024 * 1024;
const DATABASES = (env.BENCH_DATABASES ?? 'postgres').split(',');
const PG_URL = env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const CSV_MB = Number(env.BENCH_CSV_MB ?? 100);
const PDF_PAGES = Number(env.BENCH_PDF_PAGES ?? 200);
const MODES = (env.BENCH_MODES ?? 'idle,main,pool').split(',');
const CHATS = Number(env.BENCH_CHATS ?? 4);
/** How long the noise floor (`idle` mode: the /chat load without a document) is measured. */
const IDLE_MS = Number(env.BENCH_IDLE_MS ?? 60_000);
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-ingest-isolation-'));
const API_KEY = `svc_ai_${'b'.repeat(64)}`;
const EMAIL = 'bench@example.com';
const PASSWORD = 'bench password of some length';

// ---------- files ----------

const WORDS =
  'harbour kettle orchard glacier violin comet bakery tunnel quiet bright narrow ancient heavy silver rapid gentle'.split(
    ' ',
  );
let seed = 42;
const rand = () => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed / 0x7fffffff;
};
const words = (n: number) =>
  Array.from({ length: n }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(' ');

/** A CSV of whole rows under `mb` megabytes, like bench/rag's price list. */
async function writeCsv(file: string, mb: number): Promise<number> {
  const out = fs.createWriteStream(file);
  const header = 'id,sku,region,product,description\n';
  out.write(header);
  let bytes = header.length;
  let rows = 0;
  for (;;) {
    let block = '';
    for (let i = 0; i < 1000; i++) {
      const row = `${rows + 1},SKU-${(rows * 7919) % 100000},${WORDS[rows % 4]},${words(2)},"${words(14)}"\n`;
      if (bytes + row.length > mb * MB) break;
      block += row;
      bytes += row.length;
      rows++;
    }
    if (!block) break;
    if (!out.write(block)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((r) => out.end(() => r()));
  return rows;
}

/** A PDF of `pages` pages of about 1,900 characters each (pdf-lib). */
async function writePdf(file: string, pages: number) {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  for (let p = 0; p < pages; p++) {
    const page = doc.addPage([612, 792]);
    for (let l = 0; l < 24; l++) {
      page.drawText(`${words(12)}.`.slice(0, 90), { x: 40, y: 750 - l * 14, size: 10, font });
    }
  }
  fs.writeFileSync(file, await doc.save());
}

// ---------- the server ----------

interface Server {
  url: string;
  child: ChildProcess;
  ask<T>(type: string): Promise<T>;
  close(): Promise<void>;
}

async function startServer(extraEnv: Record<string, string | undefined>): Promise<Server> {
  const script = fileURLToPath(new URL('./server.ts', import.meta.url));
  const child = fork(script, [], {
    execArgv: ['--import', 'tsx', '--liftoff-only'],
    env: { ...env, MALLOC_ARENA_MAX: '2', LOG_LEVEL: 'warn', HOST: '127.0.0.1', ...extraEnv },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const waiting = new Map<string, (m: any) => void>();
  child.on('message', (m: any) => waiting.get(m.type)?.(m));
  const ready = await new Promise<{ url: string }>((resolve, reject) => {
    waiting.set('ready', resolve);
    child.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
  return {
    url: ready.url,
    child,
    ask: <T>(type: string) =>
      new Promise<T>((resolve) => {
        waiting.set(type, resolve as (m: any) => void);
        child.send({ type });
      }),
    async close() {
      child.disconnect();
      await new Promise((r) => child.once('exit', r));
    },
  };
}

// ---------- load ----------

/** Clients streaming `/chat` one reply after another; each stream's longest gap between chunks. */
function chatLoad(url: string, clients: number) {
  const gaps: number[] = [];
  let stopped = false;
  let failures = 0;
  const client = async () => {
    while (!stopped) {
      try {
        const res = await fetch(`${url}/api/v1/chat`, {
          method: 'POST',
          headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'Any news?' }], stream: true }),
        });
        if (res.status !== 200) {
          failures++;
          await res.text();
          await new Promise((r) => setTimeout(r, 200));
          continue;
        }
        const reader = (res.body as ReadableStream<Uint8Array>).getReader();
        let last = performance.now();
        let first = true;
        let longest = 0;
        for (;;) {
          const { done } = await reader.read();
          const now = performance.now();
          if (done) break;
          if (!first) longest = Math.max(longest, now - last);
          first = false;
          last = now;
        }
        gaps.push(longest);
      } catch {
        failures++;
      }
    }
  };
  const running = Array.from({ length: clients }, client);
  return {
    async stop() {
      stopped = true;
      await Promise.all(running);
      return { gaps, failures };
    },
  };
}

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] as number;
};

async function measure(database: string, mode: string, file: { name: string; path: string; label: string }) {
  let db: TestDatabase | undefined;
  const dataDir = fs.mkdtempSync(path.join(TMP, 'data-'));
  if (database === 'postgres') db = await createServerDatabase(PG_URL, 'aisuite_bench_iso');
  const fake = await startFakeOpenAI({
    defaultReply: { text: 'All quiet on the harbour tonight. '.repeat(5), chunkSize: 4, paceMs: 25 },
  });
  const server = await startServer({
    ...fakeOpenAIEnv(fake),
    DATABASE_URL: db?.databaseUrl,
    DATA_DIR: dataDir,
    INIT_WORKSPACE_NAME: 'Bench',
    INIT_USER_EMAIL: EMAIL,
    INIT_USER_PASSWORD: PASSWORD,
    INIT_API_KEY: API_KEY,
    INIT_CREDITS_USD: '1000',
    DOCUMENT_WORKERS: mode === 'main' ? '0' : undefined,
    RATE_LIMIT_CHAT: '1000000',
  });
  try {
    const signIn = await fetch(`${server.url}/api/v1/auth/sign-in`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: EMAIL, password: PASSWORD }),
    });
    const { token, workspace } = (await signIn.json()) as { token: string; workspace: { id: string } };
    const fd = new FormData();
    fd.append('kind', 'files');
    fd.append('file[]', await fs.openAsBlob(file.path), file.name);
    const imported = await fetch(`${server.url}/api/v1/workspaces/${workspace.id}/storage/import`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}` },
      body: fd,
    });
    const fileId = ((await imported.json()) as { fileIds: string[] }).fileIds[0];
    const load = chatLoad(server.url, CHATS);
    await new Promise((r) => setTimeout(r, 2000));
    await server.ask('reset');
    const t0 = performance.now();
    if (mode === 'idle') {
      // The noise floor: the same /chat load, no document.
      await new Promise((r) => setTimeout(r, IDLE_MS));
      const eld = await server.ask<{ p50: number; p99: number; max: number; count: number }>('eld');
      const chat = await load.stop();
      return {
        database,
        mode: 'no document (the /chat load alone)',
        file: '—',
        status: 'ready',
        chunks: 0,
        seconds: IDLE_MS / 1000,
        throughput: '—',
        eld,
        chatGapP99: pct(chat.gaps, 99),
        chatGapMax: Math.max(...chat.gaps),
        streams: chat.gaps.length,
        failures: chat.failures,
      };
    }
    const res = await fetch(`${server.url}/api/v1/workspaces/${workspace.id}/storage/files/${fileId}/index`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: '{}',
    });
    const { documentId } = (await res.json()) as { documentId: string };
    let doc: { status: string; chunks: number; error: string | null } | undefined;
    for (;;) {
      const list = await fetch(`${server.url}/api/v1/rag/documents?workspace_id=${workspace.id}`, {
        headers: { authorization: `Bearer ${token}` },
      });
      const { documents } = (await list.json()) as { documents: (typeof doc & { id: string })[] };
      doc = documents.find((d) => d?.id === documentId);
      if (doc?.status === 'ready' || doc?.status === 'failed') break;
      await new Promise((r) => setTimeout(r, 500));
    }
    const seconds = (performance.now() - t0) / 1000;
    const eld = await server.ask<{ p50: number; p99: number; max: number; count: number }>('eld');
    const chat = await load.stop();
    const size = fs.statSync(file.path).size;
    return {
      database,
      mode: mode === 'main' ? 'event loop (DOCUMENT_WORKERS=0)' : 'worker pool',
      file: file.label,
      status: doc?.status,
      chunks: doc?.chunks,
      seconds,
      throughput: file.name.endsWith('.pdf')
        ? `${(PDF_PAGES / seconds).toFixed(0)} pages/s`
        : `${(size / MB / seconds).toFixed(2)} MB/s`,
      eld,
      chatGapP99: pct(chat.gaps, 99),
      chatGapMax: Math.max(...chat.gaps),
      streams: chat.gaps.length,
      failures: chat.failures,
    };
  } finally {
    await server.close();
    await fake.close();
    await db?.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

const csvPath = path.join(TMP, 'prices.csv');
const rows = await writeCsv(csvPath, CSV_MB);
const pdfPath = path.join(TMP, 'manual.pdf');
await writePdf(pdfPath, PDF_PAGES);
const files = [
  { name: 'manual.pdf', path: pdfPath, label: `PDF, ${PDF_PAGES} pages` },
  { name: 'prices.csv', path: csvPath, label: `CSV, ${CSV_MB} MB, ${rows} rows` },
];
console.log(
  `load average ${os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}; ${os.availableParallelism()} cores`,
);
const results = [];
for (const database of DATABASES) {
  if (MODES.includes('idle')) {
    const r = await measure(database, 'idle', files[0] as (typeof files)[0]);
    results.push(r);
    console.log(JSON.stringify(r));
  }
  for (const file of files) {
    for (const mode of MODES.filter((m) => m !== 'idle')) {
      const r = await measure(database, mode, file);
      results.push(r);
      console.log(JSON.stringify(r));
    }
  }
}
console.log(
  `load average ${os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
);
console.log(
  '\n| database | file | extraction | indexed in | throughput | chunks | event-loop delay p50 / p99 / max ms | /chat longest gap p99 / max ms | streams |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of results) {
  console.log(
    `| ${r.database} | ${r.file} | ${r.mode} | ${r.seconds.toFixed(1)} s | ${r.throughput} | ${r.chunks} | ${r.eld.p50.toFixed(1)} / ${r.eld.p99.toFixed(1)} / ${r.eld.max.toFixed(1)} | ${r.chatGapP99.toFixed(0)} / ${r.chatGapMax.toFixed(0)} | ${r.streams} |`,
  );
}
fs.rmSync(TMP, { recursive: true, force: true });
