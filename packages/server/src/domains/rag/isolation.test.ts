import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  deepJson,
  docxBomb,
  endlessWord,
  type FakeOpenAI,
  fakeOpenAIEnv,
  hugeCsvRecord,
  manyPagesPdf,
  startFakeOpenAI,
  wideCsv,
} from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServerDatabase, type TestDatabase } from '../../test/harness.js';
import { spawnServerProcess } from '../../test/spawn.js';

/**
 * Issue 38: hostile documents, uploaded to a server running as a process of its own (as
 * `pnpm start` runs it), on the embedded database or the PostgreSQL server. While each is
 * indexed, `/healthz` and `/chat` streams must keep answering (generous timeouts: liveness,
 * not speed), the document must end as the table says, and the process's RSS (read from
 * /proc, PGlite and the extraction workers included) must stay bounded.
 */

const MB = 1024 * 1024;
const WORKER_MEMORY_MB = 256;
/** Peak RSS over the idle baseline: a worker's heap limit plus buffers of the 100 MB class. */
const RSS_GROWTH_LIMIT_MB = WORKER_MEMORY_MB + 400;
const API_KEY = `svc_ai_${'k'.repeat(64)}`;
const EMAIL = 'mallory@example.com';
const PASSWORD = 'correct horse battery staple';

let fake: FakeOpenAI;
let db: TestDatabase | undefined;
let child: ChildProcess;
let url = '';
let token = '';
let workspaceId = '';
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-isolation-'));

const rssMb = () => {
  const status = fs.readFileSync(`/proc/${child.pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]) / 1024;
};

beforeAll(async () => {
  // Each /chat reply streams for about a second.
  fake = await startFakeOpenAI({
    defaultReply: { text: 'All quiet on the harbour. '.repeat(8), paceMs: 20 },
  });
  if (process.env.DATABASE_URL) db = await createServerDatabase(process.env.DATABASE_URL);
  child = spawnServerProcess({
    ...fakeOpenAIEnv(fake),
    DATABASE_URL: db?.databaseUrl,
    DATA_DIR: dataDir,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
    INIT_WORKSPACE_NAME: 'Harbour',
    INIT_USER_EMAIL: EMAIL,
    INIT_USER_PASSWORD: PASSWORD,
    INIT_API_KEY: API_KEY,
    INIT_CREDITS_USD: '100',
    DOCUMENT_WORKER_MEMORY_MB: String(WORKER_MEMORY_MB),
  });
  let out = '';
  child.stdout?.on('data', (d) => {
    out += d.toString();
  });
  child.stderr?.on('data', (d) => {
    out += d.toString();
  });
  const deadline = Date.now() + 240_000; // a server process starting under heavy load
  while (!/"url":"(http:\/\/[^"]+)"/.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`the server did not start:\n${out}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  url = /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1] as string;
  const res = await fetch(`${url}/api/v1/auth/sign-in`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: EMAIL, password: PASSWORD }),
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { token: string; workspace: { id: string } };
  token = body.token;
  workspaceId = body.workspace.id;
}, 300_000);

afterAll(async () => {
  if (child && child.exitCode === null) {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  }
  await fake?.close();
  await db?.drop();
  fs.rmSync(dataDir, { recursive: true, force: true });
}, 60_000);

/** `/healthz` every 250 ms and one `/chat` stream after another, until stopped. */
function liveness() {
  const failures: string[] = [];
  let stopped = false;
  let healthChecks = 0;
  let chats = 0;
  let slowestHealthMs = 0;
  const health = (async () => {
    while (!stopped) {
      const t0 = performance.now();
      try {
        const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(10_000) });
        if (res.status !== 200) failures.push(`/healthz ${res.status}`);
        healthChecks++;
      } catch (err) {
        failures.push(`/healthz: ${(err as Error).message}`);
      }
      slowestHealthMs = Math.max(slowestHealthMs, performance.now() - t0);
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  const chat = (async () => {
    while (!stopped) {
      try {
        const res = await fetch(`${url}/api/v1/chat`, {
          method: 'POST',
          headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'Any news?' }], stream: true }),
          signal: AbortSignal.timeout(30_000),
        });
        const text = await res.text();
        if (res.status !== 200 || !text.includes('All quiet on the harbour.')) {
          failures.push(`/chat ${res.status}: ${text.slice(0, 100)}`);
        }
        chats++;
      } catch (err) {
        failures.push(`/chat: ${(err as Error).message}`);
      }
    }
  })();
  return {
    async stop() {
      stopped = true;
      await Promise.all([health, chat]);
      return { failures, healthChecks, chats, slowestHealthMs };
    },
  };
}

/** Samples the server's RSS every 50 ms. */
function rssPeak() {
  let peak = rssMb();
  const timer = setInterval(() => {
    try {
      peak = Math.max(peak, rssMb());
    } catch {}
  }, 50);
  return () => {
    clearInterval(timer);
    return peak;
  };
}

const session = { authorization: () => `Bearer ${token}` };

async function upload(name: string, content: Buffer) {
  const fd = new FormData();
  fd.append('workspace_id', workspaceId);
  fd.append('files[]', new Blob([new Uint8Array(content)]), name);
  const res = await fetch(`${url}/api/v1/rag/upload`, {
    method: 'POST',
    headers: { authorization: session.authorization() },
    body: fd,
    signal: AbortSignal.timeout(600_000),
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

async function storeAndIndex(name: string, content: Buffer) {
  const fd = new FormData();
  fd.append('kind', 'files');
  fd.append('file[]', new Blob([new Uint8Array(content)]), `hostile/${name}`);
  const imported = await fetch(`${url}/api/v1/workspaces/${workspaceId}/storage/import`, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}` },
    body: fd,
  });
  expect(imported.status).toBe(201);
  const fileId = ((await imported.json()) as { fileIds: string[] }).fileIds[0] as string;
  const res = await fetch(`${url}/api/v1/workspaces/${workspaceId}/storage/files/${fileId}/index`, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: '{}',
  });
  const body = (await res.json()) as Record<string, any>;
  if (res.status !== 202) return { status: res.status, body };
  // The background run: until its document settles.
  for (let i = 0; i < 2400; i++) {
    const list = await fetch(`${url}/api/v1/rag/documents?workspace_id=${workspaceId}`, {
      headers: { authorization: session.authorization() },
    });
    const { documents } = (await list.json()) as {
      documents: { id: string; status: string; error: string | null; chunks: number }[];
    };
    const doc = documents.find((d) => d.id === body.documentId);
    if (doc && (doc.status === 'ready' || doc.status === 'failed')) return { status: 202, doc };
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${name}: indexing did not settle`);
}

interface Case {
  name: string;
  make: () => Buffer;
  /** At /rag/upload: refused before storing (400) or indexed to this end. */
  upload: { refused: string } | { failed: string } | { ready: true };
  /** Through storage and the index endpoint. */
  storage: { refused: string } | { failed: string } | { ready: true };
}

const CASES: Case[] = [
  {
    name: 'wide.csv',
    make: () => wideCsv(100_000),
    upload: { refused: 'CSV record 1 has more than 2000 columns; the limit is 2000' },
    storage: { refused: 'CSV record 1 has more than 2000 columns; the limit is 2000' },
  },
  {
    name: 'record.csv',
    make: () => hugeCsvRecord(16 * MB),
    upload: { failed: 'CSV record 2 is larger than 1 MB; the limit is 1 MB' },
    storage: { failed: 'CSV record 2 is larger than 1 MB; the limit is 1 MB' },
  },
  {
    name: 'pages.pdf',
    make: () => manyPagesPdf(100_000),
    upload: { failed: 'PDF has 100000 pages; the limit is 2000' },
    storage: { failed: 'PDF has 100000 pages; the limit is 2000' },
  },
  {
    name: 'bomb.docx',
    make: () => docxBomb(),
    upload: { refused: 'DOCX part word/document.xml inflates to more than 8 MB; the limit is 8 MB per part' },
    storage: { failed: 'DOCX part word/document.xml inflates to more than 8 MB; the limit is 8 MB per part' },
  },
  {
    name: 'liar.docx',
    make: () => docxBomb({ declaredSize: 4096 }),
    upload: {
      failed: 'Invalid DOCX: part word/document.xml inflates to more than the 4096 bytes it declares',
    },
    storage: {
      failed: 'Invalid DOCX: part word/document.xml inflates to more than the 4096 bytes it declares',
    },
  },
  {
    name: 'deep.json',
    make: () => deepJson(100_000),
    upload: { refused: 'JSON is nested deeper than 64 levels; the limit is 64' },
    storage: { refused: 'JSON is nested deeper than 64 levels; the limit is 64' },
  },
  {
    name: 'word.txt',
    make: () => endlessWord(2 * MB),
    upload: { ready: true },
    storage: { ready: true },
  },
];

describe('hostile documents on a server process of its own', () => {
  it('a small document indexes (the pool starts); the idle baseline is taken after it', async () => {
    const res = await upload('warm.txt', Buffer.from('The harbour is calm today. The lighthouse works.'));
    expect(res.status).toBe(200);
    expect(res.body.results).toMatchObject({ successful: 1 });
  }, 300_000);

  for (const c of CASES) {
    it(`${c.name}: ends as expected while /healthz and /chat keep answering, RSS bounded`, async () => {
      const content = c.make();
      const baseline = rssMb();
      const peak = rssPeak();
      const live = liveness();
      let growth = 0;
      try {
        const up = await upload(c.name, content);
        if ('refused' in c.upload) {
          expect(up.status).toBe(400);
          expect(up.body.error).toBe(c.upload.refused);
          expect(up.body.details.results[0]).toMatchObject({ status: 'failed', documentId: null });
        } else {
          expect(up.status).toBe(200);
          const detail = up.body.results.details[0];
          if ('failed' in c.upload)
            expect(detail).toMatchObject({ status: 'failed', error: c.upload.failed });
          else expect(detail).toMatchObject({ status: 'completed' });
        }
        const st = await storeAndIndex(c.name, content);
        if ('refused' in c.storage) {
          expect(st.status).toBe(400);
          expect(st.body).toMatchObject({ error: c.storage.refused, code: 'DOCUMENT_LIMIT_EXCEEDED' });
        } else if ('failed' in c.storage) {
          expect(st.doc).toMatchObject({ status: 'failed', error: c.storage.failed, chunks: 0 });
        } else {
          expect(st.doc).toMatchObject({ status: 'ready' });
        }
      } finally {
        growth = peak() - baseline;
      }
      const health = await live.stop();
      expect(health.failures).toEqual([]);
      expect(health.healthChecks).toBeGreaterThan(0);
      expect(health.chats).toBeGreaterThan(0);
      expect(growth, `peak RSS ${growth.toFixed(0)} MB over ${baseline.toFixed(0)} MB`).toBeLessThan(
        RSS_GROWTH_LIMIT_MB,
      );
      console.log(
        `${c.name}: RSS +${growth.toFixed(0)} MB over ${baseline.toFixed(0)} MB; ${health.healthChecks} health checks (slowest ${health.slowestHealthMs.toFixed(0)} ms), ${health.chats} chat streams`,
      );
    }, 900_000);
  }

  it('afterwards an ordinary document still indexes', async () => {
    const res = await upload(
      'after.md',
      Buffer.from('# Tides\n\nThe tide turns at six. The boats go out at seven.\n'),
    );
    expect(res.body.results).toMatchObject({ successful: 1 });
  }, 300_000);
});
