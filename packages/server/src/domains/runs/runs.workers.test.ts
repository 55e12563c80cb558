import { type ChildProcess, fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WORKER_LOST_ERROR } from '../../runs/index.js';
import {
  createTestWorkspace,
  type FakeOpenAI,
  fakeOpenAIEnv,
  startFakeOpenAI,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

/**
 * Several processes on one database: runs are leased, executed exactly once, recovered when
 * their worker is killed, and handed back on a graceful shutdown.
 */

const here = path.dirname(fileURLToPath(import.meta.url));
const seen = new Map<string, number>();
let fake: FakeOpenAI;
let api: TestServer; // HTTP only: RUN_WORKER_CONCURRENCY=0
let ws: TestWorkspace;
let agentId: string;
const children: ChildProcess[] = [];
const tmpDirs: string[] = [];

const baseEnv = () => ({
  ...fakeOpenAIEnv(fake),
  RUN_POLL_INTERVAL_MS: '50',
  // Long enough that a slow (embedded, shared-CPU) heartbeat never loses a live lease.
  RUN_LEASE_MS: '20000',
});

/** First request of a task containing HANG-ONCE hangs; every later one answers. */
function modelRouter(body: any) {
  const msgs = (body?.messages ?? []) as { role: string; content?: string }[];
  const task = String(msgs.filter((m) => m.role === 'user').at(-1)?.content ?? '');
  const n = (seen.get(task) ?? 0) + 1;
  seen.set(task, n);
  if (task.includes('HANG-ONCE') && n === 1) return { hang: true };
  return { text: `Answer to ${task}`, delayMs: 30 };
}

beforeAll(async () => {
  fake = await startFakeOpenAI({ defaultReply: modelRouter });
  api = await startTestServer({ env: { ...baseEnv(), RUN_WORKER_CONCURRENCY: '0' } });
  ws = await createTestWorkspace(api, { creditsUsd: '10' });
  const res = await api.api('/managed-agents/agents', {
    method: 'POST',
    key: ws.apiKey,
    json: { name: 'Worker test', config: { capabilities: { deliverables: { enabled: true } } } },
  });
  agentId = ((await res.json()) as { agent: { id: string } }).agent.id;
});

afterEach(async () => {
  // A failed test must not leave workers that would take the next test's runs.
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

afterAll(async () => {
  await api?.close();
  await fake?.close();
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

/** Another OS process running the server (and its workers) on the same database. */
async function spawnWorker(env: Record<string, string> = {}): Promise<ChildProcess> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-worker-'));
  tmpDirs.push(dataDir);
  const dbEnv: Record<string, string> = {};
  if (api.db.databaseUrl) dbEnv.DATABASE_URL = api.db.databaseUrl;
  else {
    // The embedded database of this process, reached over its socket like the CLI does.
    const emb = api.db.embedded as NonNullable<TestServer['db']['embedded']>;
    fs.writeFileSync(
      path.join(dataDir, 'embedded-pg.lock.json'),
      JSON.stringify({ pid: process.pid, socketDir: emb.socketDir, port: emb.port, startedAt: '' }),
    );
  }
  const child = fork(path.join(here, 'worker-child.fixture.ts'), [], {
    execArgv: ['--import', 'tsx'],
    cwd: path.resolve(here, '../../..'),
    env: {
      PATH: process.env.PATH ?? '',
      LOG_LEVEL: 'silent',
      DATA_DIR: dataDir,
      ...baseEnv(),
      ...dbEnv,
      ...env,
    },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    child.once('message', () => resolve());
    child.once('exit', (code) => reject(new Error(`worker exited early (${code})`)));
  });
  return child;
}

async function stopWorker(c: ChildProcess) {
  if (c.exitCode !== null || c.signalCode !== null) return;
  const exited = new Promise((r) => c.once('exit', r));
  c.kill('SIGTERM');
  await exited;
}

const em = () => api.server.deps.em();

async function createRun(task: string) {
  const res = await api.api(`/managed-agents/agents/${agentId}/runs`, {
    method: 'POST',
    key: ws.apiKey,
    json: { task },
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { runId: string }).runId;
}

async function runRow(runId: string) {
  const rows = await em().execute<Record<string, any>[]>('select * from runs where id = ?', [runId]);
  return rows[0] as Record<string, any>;
}

async function waitFor<T>(fn: () => Promise<T | undefined | false>, what: string): Promise<T> {
  for (let i = 0; i < 1000; i++) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const isTerminal = (s: string) => ['completed', 'failed', 'cancelled'].includes(s);

async function eventTypes(runId: string): Promise<string[]> {
  const rows = await em().execute<{ type: string }[]>(
    'select type from run_events where run_id = ? order by seq',
    [runId],
  );
  return rows.map((r) => r.type);
}

// Each child process loads the whole server through tsx: slow on a shared machine.
describe('worker processes', { timeout: 240_000 }, () => {
  it('two worker processes sharing one database execute every run exactly once', async () => {
    const [a, b] = (await Promise.all([spawnWorker(), spawnWorker()])) as [ChildProcess, ChildProcess];
    const before = fake.requests.length;
    const ids = await Promise.all(Array.from({ length: 8 }, (_, i) => createRun(`job ${i}`)));
    await waitFor(async () => {
      for (const id of ids) if (!isTerminal((await runRow(id)).status)) return false;
      return true;
    }, 'all runs');
    for (const id of ids) {
      const row = await runRow(id);
      expect(row.status).toBe('completed');
      expect(row.attempts).toBe(1);
      const types = await eventTypes(id);
      expect(types.filter((t) => t === 'run.started')).toHaveLength(1);
      expect(types.filter((t) => t === 'run.completed')).toHaveLength(1);
    }
    // One model call per run: none was executed twice.
    expect(fake.requests.length - before).toBe(8);
    await Promise.all([stopWorker(a), stopWorker(b)]);
  });

  it('recovers a run whose worker process was killed mid-run, and fails one out of attempts', async () => {
    // The killed worker's lease is short so the test does not wait long for it to expire.
    const child = await spawnWorker({ RUN_LEASE_MS: '2000' });
    const recoverable = await createRun('HANG-ONCE recoverable');
    const exhausted = await createRun('HANG-ONCE exhausted');
    // Both are executing in the child: their model calls are in flight.
    await waitFor(
      async () => seen.get('HANG-ONCE recoverable') === 1 && seen.get('HANG-ONCE exhausted') === 1,
      'both model calls',
    );
    expect((await runRow(recoverable)).status).toBe('running');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    await em().execute('update runs set max_attempts = 1 where id = ?', [exhausted]);

    // A new worker finds the expired leases.
    const worker = await startTestServer({ db: api.db, env: baseEnv() });
    try {
      const done = await waitFor(async () => {
        const r = await runRow(recoverable);
        return isTerminal(r.status) && r;
      }, 'recovered run');
      expect(done.status).toBe('completed');
      expect(done.attempts).toBe(2);
      const types = await eventTypes(recoverable);
      expect(types.filter((t) => t === 'run.started')).toHaveLength(1);
      expect(types.at(-1)).toBe('run.completed');

      const failed = await waitFor(async () => {
        const r = await runRow(exhausted);
        return isTerminal(r.status) && r;
      }, 'exhausted run');
      expect(failed.status).toBe('failed');
      expect(failed.error).toBe(WORKER_LOST_ERROR);
      // The get-run endpoint shows it failed with the reason.
      const res = await api.api(`/managed-agents/agents/${agentId}/runs/${exhausted}`, { key: ws.apiKey });
      const body = (await res.json()) as { run: { status: string; error: string } };
      expect(body.run).toMatchObject({ status: 'failed', error: WORKER_LOST_ERROR });

      // The killed worker's credit holds (one per model call in flight) are settled by the
      // sweep once their lease expires: the unused part refunded under the request's ref,
      // a usage record `aborted` for what was sent; the ledger nets to the recorded usage.
      await waitFor(
        async () =>
          (await em().execute('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId]))
            .length === 0,
        'the dead holds settled',
      );
      for (const runId of [recoverable, exhausted]) {
        const lost = await em().execute<{ request_id: string; input_tokens: string }[]>(
          `select request_id, input_tokens from usage_records where run_id = ? and provider_status = 'aborted'`,
          [runId],
        );
        expect(lost).toHaveLength(1);
        expect(Number(lost[0]?.input_tokens)).toBeGreaterThan(0);
        const refunds = await em().execute(
          `select 1 from credit_ledger where workspace_id = ? and kind = 'refund' and ref = ?`,
          [ws.workspaceId, lost[0]?.request_id],
        );
        expect(refunds.length).toBeGreaterThanOrEqual(1);
      }
      const [net] = await em().execute<{ ledger: string; usage: string }[]>(
        `select (select -coalesce(sum(amount_micros), 0) from credit_ledger where workspace_id = ? and kind <> 'grant') as ledger,
                (select coalesce(sum(cost_micros), 0) from usage_records where workspace_id = ?) as usage`,
        [ws.workspaceId, ws.workspaceId],
      );
      expect(Number(net?.ledger)).toBe(Number(net?.usage));
    } finally {
      await worker.close();
    }
  });

  it('hands a running run back on graceful shutdown; another worker finishes it', async () => {
    const first = await startTestServer({ db: api.db, env: baseEnv() });
    const runId = await createRun('HANG-ONCE shutdown');
    await waitFor(async () => seen.get('HANG-ONCE shutdown') === 1, 'model call');
    await first.close();
    const handed = await runRow(runId);
    expect(handed.status).toBe('running');
    expect(handed.attempts).toBe(1);
    const second = await startTestServer({ db: api.db, env: baseEnv() });
    try {
      const done = await waitFor(async () => {
        const r = await runRow(runId);
        return isTerminal(r.status) && r;
      }, 'handed-back run');
      expect(done.status).toBe('completed');
      expect(done.attempts).toBe(2);
    } finally {
      await second.close();
    }
  });
});
