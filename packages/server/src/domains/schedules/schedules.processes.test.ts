import { type ChildProcess, fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
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
 * Schedules on several server processes sharing one PostgreSQL server (decision 0045): each
 * tick makes exactly one run whichever process fires it, and a process killed between claiming
 * a tick and writing its run leaves the tick to another process, which makes its one run.
 * The embedded database serves one process's connections only through a socket shared by the
 * test; these run against the PostgreSQL server (DATABASE_URL), as in CI.
 */
const here = path.dirname(fileURLToPath(import.meta.url));
const onServer = Boolean(process.env.DATABASE_URL);
let fake: FakeOpenAI;
let api: TestServer;
let ws: TestWorkspace;
let agentId: string;
const children: ChildProcess[] = [];
const tmpDirs: string[] = [];

const baseEnv = () => ({
  ...fakeOpenAIEnv(fake),
  RUN_POLL_INTERVAL_MS: '50',
  RUN_LEASE_MS: '20000',
  SCHEDULE_MIN_INTERVAL_SECONDS: '1',
  SCHEDULE_POLL_INTERVAL_MS: '50',
});

beforeAll(async () => {
  if (!onServer) return;
  fake = await startFakeOpenAI({ defaultReply: () => ({ text: 'Scheduled work done.', delayMs: 10 }) });
  // This process serves HTTP only: neither runs nor ticks happen here unless a test starts them.
  api = await startTestServer({
    env: { ...baseEnv(), RUN_WORKER_CONCURRENCY: '0', SCHEDULE_POLL_INTERVAL_MS: '0' },
  });
  ws = await createTestWorkspace(api, { creditsUsd: '10' });
  const res = await api.api('/managed-agents/agents', {
    method: 'POST',
    key: ws.apiKey,
    json: { name: 'Cron', config: { capabilities: { deliverables: { enabled: true } } } },
  });
  agentId = ((await res.json()) as { agent: { id: string } }).agent.id;
});

afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

afterAll(async () => {
  await api?.close();
  await fake?.close();
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

type Message = { ready?: boolean; claimed?: boolean; scheduleId?: string; tickAt?: string };

/** Another OS process running the whole server (workers and ticker) on the same database. */
async function spawnServer(env: Record<string, string> = {}, onMessage?: (m: Message) => void) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-ticker-'));
  tmpDirs.push(dataDir);
  const child = fork(path.join(here, 'ticker-child.fixture.ts'), [], {
    execArgv: ['--import', 'tsx'],
    cwd: path.resolve(here, '../../..'),
    env: {
      PATH: process.env.PATH ?? '',
      LOG_LEVEL: 'silent',
      DATA_DIR: dataDir,
      DATABASE_URL: api.db.databaseUrl as string,
      ...baseEnv(),
      ...env,
    },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  children.push(child);
  if (onMessage) child.on('message', (m) => onMessage(m as Message));
  await new Promise<void>((resolve, reject) => {
    child.on('message', (m) => (m as Message).ready && resolve());
    child.once('exit', (code) => reject(new Error(`server process exited early (${code})`)));
  });
  return child;
}

async function stop(c: ChildProcess) {
  if (c.exitCode !== null || c.signalCode !== null) return;
  const exited = new Promise((r) => c.once('exit', r));
  c.kill('SIGTERM');
  await exited;
}

const em = () => api.server.deps.em();

async function createSchedule(body: Record<string, unknown>) {
  const res = await api.api(`/managed-agents/agents/${agentId}/schedules`, {
    method: 'POST',
    key: ws.apiKey,
    json: body,
  });
  expect(res.status, await res.clone().text()).toBe(201);
  return ((await res.json()) as { schedule: { id: string } }).schedule;
}

async function waitFor<T>(fn: () => Promise<T | undefined | false | null>, what: string): Promise<T> {
  for (let i = 0; i < 2400; i++) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

type RunOfTick = { run_id: string; tick: string; status: string };
const runsOfSchedule = (scheduleId: string) =>
  em().execute<RunOfTick[]>(
    `select a.run_id, a.metadata->>'scheduleTickAt' as tick, r.status
     from autonomous_runs a join runs r on r.id = a.run_id where a.schedule_id = ? order by tick`,
    [scheduleId],
  );
const ticksOf = (scheduleId: string) =>
  em().execute<{ tick_at: Date; status: string; run_id: string | null }[]>(
    `select tick_at, status, run_id from schedule_ticks where schedule_id = ? and trigger = 'schedule' order by tick_at`,
    [scheduleId],
  );

describe.skipIf(!onServer)('schedules on several processes', { timeout: 300_000 }, () => {
  it('a schedule fires once per tick with two processes ticking', async () => {
    const [a, b] = await Promise.all([spawnServer(), spawnServer()]);
    // Every two seconds; overlap "queue" so every tick makes a run whatever the previous did.
    const s = await createSchedule({ cron: '*/2 * * * * *', task: 'Every two seconds', overlap: 'queue' });
    await waitFor(async () => (await ticksOf(s.id)).length >= 4, 'four ticks');
    await api.api(`/managed-agents/agents/${agentId}/schedules/${s.id}`, {
      method: 'PATCH',
      key: ws.apiKey,
      json: { enabled: false },
    });
    // The two processes' workers finish the runs.
    await waitFor(
      async () => (await runsOfSchedule(s.id)).every((r) => r.status === 'completed'),
      'the runs to complete',
    );
    await Promise.all([stop(a), stop(b)]);
    const ticks = await ticksOf(s.id);
    const runs = await runsOfSchedule(s.id);
    // One run per tick, one tick per firing time, nothing skipped or failed.
    expect(ticks.length).toBeGreaterThanOrEqual(4);
    expect(ticks.every((t) => t.status === 'started')).toBe(true);
    expect(runs).toHaveLength(ticks.length);
    expect(new Set(runs.map((r) => r.tick)).size).toBe(runs.length);
    expect(runs.map((r) => r.tick).sort()).toEqual(
      ticks.map((t) => new Date(t.tick_at).toISOString()).sort(),
    );
    // The ticks are the expression's times: whole even seconds.
    for (const t of ticks) expect(new Date(t.tick_at).getUTCSeconds() % 2).toBe(0);
    const started = await em().execute<{ n: string }[]>(
      `select count(*) as n from run_events e join autonomous_runs a on a.run_id = e.run_id
       where a.schedule_id = ? and e.type = 'run.started'`,
      [s.id],
    );
    expect(Number(started[0]?.n)).toBe(runs.length);
  });

  it('a process killed between claiming a tick and writing its run: the tick still makes exactly one run', async () => {
    let claimed: Message | undefined;
    const doomed = await spawnServer({ HANG_AFTER_CLAIM: '1' }, (m) => {
      if (m.claimed) claimed ??= m;
    });
    // Yearly, made due now: only the doomed process ticks while it holds the claim.
    const s = await createSchedule({ cron: '0 0 1 1 *', task: 'Survives a crash' });
    await em().execute(`update agent_schedules set next_run_at = '2025-01-01T00:00:00Z' where id = ?`, [
      s.id,
    ]);
    await waitFor(async () => claimed, 'the claim');
    expect(claimed).toMatchObject({ scheduleId: s.id, tickAt: '2025-01-01T00:00:00.000Z' });
    // While it is held nothing is written, and the tick is not offered to anyone else.
    expect(await runsOfSchedule(s.id)).toEqual([]);
    expect(await ticksOf(s.id)).toEqual([]);
    doomed.kill('SIGKILL');
    await new Promise((r) => doomed.once('exit', r));

    // A healthy process fires the same tick, once.
    const healthy = await spawnServer();
    const runs = await waitFor(async () => {
      const r = await runsOfSchedule(s.id);
      return r.length > 0 && r;
    }, 'the run of the tick');
    // Give a second firing every chance to happen if the claim were not exclusive.
    await new Promise((r) => setTimeout(r, 1500));
    await stop(healthy);
    expect(runs.map((r) => r.tick)).toEqual(['2025-01-01T00:00:00.000Z']);
    expect(await runsOfSchedule(s.id)).toHaveLength(1);
    const ticks = await ticksOf(s.id);
    expect(ticks).toHaveLength(1);
    expect(ticks[0]).toMatchObject({ status: 'started', run_id: runs[0]?.run_id });
    const after = await em().execute<{ next_run_at: Date }[]>(
      'select next_run_at from agent_schedules where id = ?',
      [s.id],
    );
    expect(new Date(after[0]?.next_run_at as Date).getTime()).toBeGreaterThan(Date.now());
  });
});
