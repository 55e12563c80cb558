import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCK_FILE } from '../../db/embedded.js';
import { WORKER_LOST_ERROR } from '../../runs/index.js';
import {
  createServerDatabase,
  type FakeOpenAI,
  fakeOpenAIEnv,
  startFakeOpenAI,
  type TestDatabase,
} from '../../test/harness.js';
import { spawnServerProcess } from '../../test/spawn.js';

/**
 * A poisoned job: a storage file whose indexing takes its server down every time it executes
 * (here the server is killed with SIGKILL while the job runs, as an operator would after it froze
 * the process). The engine executes it at most 1 + RUN_MAX_RETRIES times, each after its lease
 * and backoff, then fails it (and the document) with the reason; a server restarted after that
 * never executes it again, and answers /healthz all along. Real server processes (`pnpm start`'s
 * entry point) on the test's database: the PostgreSQL server with DATABASE_URL, otherwise an
 * embedded data directory the server processes reopen after each kill.
 */
const onServer = Boolean(process.env.DATABASE_URL);
const API_KEY = `svc_ai_${'P'.repeat(64)}`;
const MAX_ATTEMPTS = 3;

let fake: FakeOpenAI;
let db: TestDatabase | undefined;
let dataDir: string;
let child: ChildProcess | undefined;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  if (onServer) db = await createServerDatabase(process.env.DATABASE_URL as string);
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-poison-'));
});

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await db?.drop();
  await fake?.close();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

interface Server {
  url: string;
  proc: ChildProcess;
}

async function startServer(): Promise<Server> {
  const proc = spawnServerProcess({
    ...fakeOpenAIEnv(fake),
    DATABASE_URL: db?.databaseUrl,
    DATA_DIR: dataDir,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
    INIT_WORKSPACE_NAME: 'Poison',
    INIT_API_KEY: API_KEY,
    INIT_CREDITS_USD: '10',
    RUN_POLL_INTERVAL_MS: '100',
    RUN_LEASE_MS: '2000',
    RUN_RETRY_BACKOFF_MS: '500',
    RUN_RETRY_BACKOFF_MAX_MS: '2000',
  });
  child = proc;
  let out = '';
  proc.stdout?.on('data', (d) => {
    out += d.toString();
  });
  proc.stderr?.on('data', (d) => {
    out += d.toString();
  });
  await expect
    .poll(() => /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1] ?? (proc.exitCode !== null ? out : undefined), {
      timeout: 240_000, // a server process starting on a shared, busy machine
      interval: 100,
    })
    .toMatch(/^http:\/\//);
  return { url: /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1] as string, proc };
}

async function kill9(s: Server): Promise<void> {
  const exited = once(s.proc, 'exit');
  s.proc.kill('SIGKILL');
  await exited;
}

/** One statement on the test's database (through the running server's socket when embedded). */
async function query<T>(sql: string, params: unknown[] = []): Promise<T[]> {
  let config: pg.ClientConfig;
  if (db) config = { connectionString: db.databaseUrl };
  else {
    const lock = JSON.parse(fs.readFileSync(path.join(dataDir, LOCK_FILE), 'utf8')) as {
      socketDir: string;
      port: number;
    };
    config = { host: lock.socketDir, port: lock.port, user: 'postgres', database: 'postgres' };
  }
  const c = new pg.Client(config);
  await c.connect();
  try {
    return (await c.query(sql, params)).rows as T[];
  } finally {
    await c.end();
  }
}

async function healthy(s: Server): Promise<boolean> {
  const res = await fetch(`${s.url}/healthz`, { signal: AbortSignal.timeout(5000) });
  return res.status === 200;
}

const embeddingRequests = () => fake.requests.filter((r) => r.path.endsWith('/embeddings'));

interface RunRow {
  status: string;
  attempts: number;
  max_attempts: number;
  error: string | null;
  lease_owner: string | null;
}

describe('a poisoned indexing job across kill -9 and restarts', { timeout: 900_000 }, () => {
  it('is executed at most 1 + retries times, then failed with the reason, and never resumed', async () => {
    // Every execution's first batch of embeddings never answers: the job is executing until killed.
    fake.scriptEmbeddings(...Array.from({ length: MAX_ATTEMPTS + 2 }, () => ({ hang: true })));
    let server = await startServer();
    const headers = { authorization: `Bearer ${API_KEY}` };
    const me = (await (await fetch(`${server.url}/api/v1/me`, { headers })).json()) as {
      workspace: { id: string };
    };
    const workspaceId = me.workspace.id;
    const fd = new FormData();
    fd.append('kind', 'files');
    fd.append('file[]', new Blob(['Poison. '.repeat(400)], { type: 'text/plain' }), 'poison.txt');
    const imported = await fetch(`${server.url}/api/v1/workspaces/${workspaceId}/storage/import`, {
      method: 'POST',
      headers,
      body: fd,
    });
    expect(imported.status).toBe(201);
    const fileId = ((await imported.json()) as { fileIds: string[] }).fileIds[0] as string;
    const indexed = await fetch(
      `${server.url}/api/v1/workspaces/${workspaceId}/storage/files/${fileId}/index`,
      {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: '{}',
      },
    );
    expect(indexed.status).toBe(202);
    const { runId, documentId } = (await indexed.json()) as { runId: string; documentId: string };

    for (let n = 1; n <= MAX_ATTEMPTS; n++) {
      // The job executes (its embeddings request is in flight), then its server dies.
      await expect.poll(() => embeddingRequests().length, { timeout: 120_000, interval: 50 }).toBe(n);
      const [run] = await query<RunRow>('select * from runs where id = $1', [runId]);
      expect(run).toMatchObject({ status: 'running', attempts: n, max_attempts: MAX_ATTEMPTS });
      expect(await healthy(server)).toBe(true);
      await kill9(server);
      server = await startServer();
    }

    // The last server: the job's attempts are spent, so it fails it without executing it.
    await expect
      .poll(
        async () => {
          expect(await healthy(server)).toBe(true);
          const [run] = await query<RunRow>('select * from runs where id = $1', [runId]);
          return run?.status;
        },
        { timeout: 120_000, interval: 200 },
      )
      .toBe('failed');
    const [run] = await query<RunRow>('select * from runs where id = $1', [runId]);
    const reason = `${WORKER_LOST_ERROR}; giving up after ${MAX_ATTEMPTS} attempts`;
    expect(run).toMatchObject({ status: 'failed', attempts: MAX_ATTEMPTS, error: reason, lease_owner: null });
    const events = await query<{ type: string; payload: Record<string, unknown> }>(
      'select type, payload from run_events where run_id = $1 order by seq',
      [runId],
    );
    expect(events.at(-1)).toEqual({ type: 'run.failed', payload: { runId, error: reason } });
    // The document and its file say why.
    const [doc] = await query<{ status: string; error: string | null; chunk_count: number }>(
      'select status, error, chunk_count from rag_documents where id = $1',
      [documentId],
    );
    expect(doc).toEqual({ status: 'failed', error: reason, chunk_count: 0 });
    const list = (await (
      await fetch(`${server.url}/api/v1/workspaces/${workspaceId}/storage?type=files`, { headers })
    ).json()) as { files: { id: string; indexStatus?: string }[] };
    expect(list.files.find((f) => f.id === fileId)?.indexStatus).toBe('failed');

    // Never executed again: no further embeddings request, on this server or after a restart.
    expect(embeddingRequests()).toHaveLength(MAX_ATTEMPTS);
    await kill9(server);
    server = await startServer();
    for (let i = 0; i < 10; i++) {
      expect(await healthy(server)).toBe(true);
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(embeddingRequests()).toHaveLength(MAX_ATTEMPTS);
    const [after] = await query<RunRow>('select * from runs where id = $1', [runId]);
    expect(after).toMatchObject({ status: 'failed', attempts: MAX_ATTEMPTS });
    const exited = once(server.proc, 'exit');
    server.proc.kill('SIGTERM');
    await exited;
  });
});
