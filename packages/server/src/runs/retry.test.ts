import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../test/harness.js';
import { RunBus, RunEngine, runStore, toolCallStore, WORKER_LOST_ERROR } from './index.js';
import { backoffMs, maxAttemptsFor, type RetryPolicy, retryPolicyFromEnv } from './retry.js';
import type { RunExecution, RunOutcome, RunRecord } from './types.js';

/**
 * Retries on the run engine (docs/run-engine.md, "Retries"), on a real database: an engine of
 * this test's own (short lease, short backoff) executes runs the test queues; the server's own
 * engine is HTTP-only, so it claims nothing.
 */
let ts: TestServer;
let ws: TestWorkspace;
let engine: RunEngine | undefined;

const POLICY: RetryPolicy = {
  retries: { turn: 0, autonomous: 2, rag_index: 2 },
  backoffMs: 300,
  backoffFactor: 2,
  backoffMaxMs: 1000,
};

beforeAll(async () => {
  ts = await startTestServer({ env: { RUN_WORKER_CONCURRENCY: '0' } });
  ws = await createTestWorkspace(ts);
});
afterEach(async () => {
  await engine?.stop();
  engine = undefined;
});
afterAll(async () => {
  await ts?.close();
});

const em = () => ts.server.deps.em();

interface Execution {
  runId: string;
  attempts: number;
  at: number;
}

/** An engine whose `autonomous` executor is `execute`; `failed` hook calls are recorded. */
async function startEngine(execute: (exec: RunExecution) => Promise<RunOutcome>) {
  const executions: Execution[] = [];
  const failedHook: { runId: string; error: string }[] = [];
  const log = ts.server.deps.log;
  engine = new RunEngine({
    em,
    sql: ts.server.deps.db.sql,
    log,
    bus: new RunBus({ log, em }),
    leaseMs: 3000,
    pollMs: 50,
    concurrency: 4,
    retry: POLICY,
  });
  engine.register({
    kind: 'autonomous',
    async execute(exec) {
      executions.push({ runId: exec.run.id, attempts: exec.run.attempts, at: Date.now() });
      return execute(exec);
    },
    async failed(run: RunRecord, error: string) {
      failedHook.push({ runId: run.id, error });
    },
  });
  await engine.start();
  return { engine, executions, failedHook };
}

async function waitFor<T>(fn: () => Promise<T | undefined | false>, what: string, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const ended = (runId: string): Promise<RunRecord> =>
  waitFor(async () => {
    const run = await runStore.getRun(em(), runId);
    return run !== null && ['completed', 'failed', 'cancelled'].includes(run.status) && run;
  }, `run ${runId} to end`);

async function eventsOf(runId: string) {
  return em().execute<{ seq: number; type: string; payload: Record<string, unknown> }[]>(
    'select seq, type, payload from run_events where run_id = ? order by seq',
    [runId],
  );
}

/** A run another process held when it died: lease expired `agoMs` ago, after `attempts` executions. */
async function orphan(attempts: number, maxAttempts: number, agoMs = 0): Promise<string> {
  const id = randomUUID();
  await em().execute(
    `insert into runs (id, workspace_id, kind, status, input, lease_owner, lease_expires_at, heartbeat_at,
       attempts, max_attempts, started_at)
     values (?, ?, 'autonomous', 'running', '{}'::jsonb, 'worker-that-died',
       now() - ?::interval, now() - interval '10 seconds', ?, ?, now() - interval '1 minute')`,
    [id, ws.workspaceId, `${agoMs} milliseconds`, attempts, maxAttempts],
  );
  return id;
}

describe('the retry policy', () => {
  it('gives every kind but turns 1 + RUN_MAX_RETRIES executions, with per-kind overrides', () => {
    const d = retryPolicyFromEnv({});
    expect([
      maxAttemptsFor(d, 'turn'),
      maxAttemptsFor(d, 'autonomous'),
      maxAttemptsFor(d, 'rag_index'),
    ]).toEqual([1, 3, 3]);
    expect([backoffMs(d, 1), backoffMs(d, 2), backoffMs(d, 3), backoffMs(d, 9)]).toEqual([
      5000, 30_000, 180_000, 300_000,
    ]);
    const p = retryPolicyFromEnv({
      RUN_MAX_RETRIES: '4',
      RUN_MAX_RETRIES_RAG_INDEX: '0',
      RUN_RETRY_BACKOFF_MS: '100',
      RUN_RETRY_BACKOFF_MAX_MS: '1000',
    });
    expect([
      maxAttemptsFor(p, 'turn'),
      maxAttemptsFor(p, 'autonomous'),
      maxAttemptsFor(p, 'rag_index'),
    ]).toEqual([1, 5, 1]);
    expect([backoffMs(p, 1), backoffMs(p, 2), backoffMs(p, 3)]).toEqual([100, 600, 1000]);
    // The older setting (executions of autonomous runs) still counts, below the per-kind one.
    expect(maxAttemptsFor(retryPolicyFromEnv({ RUN_AUTONOMOUS_MAX_ATTEMPTS: '2' }), 'autonomous')).toBe(2);
    expect(
      maxAttemptsFor(
        retryPolicyFromEnv({ RUN_AUTONOMOUS_MAX_ATTEMPTS: '2', RUN_MAX_RETRIES_AUTONOMOUS: '5' }),
        'autonomous',
      ),
    ).toBe(6);
    // Nonsense falls back to the default.
    expect(maxAttemptsFor(retryPolicyFromEnv({ RUN_MAX_RETRIES: '-1' }), 'rag_index')).toBe(3);
  });
});

describe('retries on the engine', { timeout: 120_000 }, () => {
  it('executes a run whose executor keeps throwing 1 + retries times, each after its backoff, then fails it with the reason', async () => {
    const { engine, executions, failedHook } = await startEngine(async (exec) => {
      await exec.emit('step', { attempt: exec.run.attempts });
      throw new Error('upstream went away');
    });
    const created = await engine.createRun(em(), { workspaceId: ws.workspaceId, kind: 'autonomous' });
    expect(created.maxAttempts).toBe(3);

    // Between two executions it waits, released, with the reason and the time it may run again.
    const waiting = await waitFor(async () => {
      const r = await runStore.getRun(em(), created.id);
      return r?.notBefore && r.leaseOwner === null && r;
    }, 'the first release');
    expect(waiting).toMatchObject({ status: 'running', attempts: 1, error: 'upstream went away' });

    const run = await ended(created.id);
    expect(run.status).toBe('failed');
    expect(run.error).toBe('upstream went away; giving up after 3 attempts');
    expect(run.attempts).toBe(3);
    const mine = executions.filter((e) => e.runId === created.id);
    expect(mine.map((e) => e.attempts)).toEqual([1, 2, 3]);
    // Each retry came no earlier than its backoff after the execution before it failed.
    expect(mine[1]!.at - mine[0]!.at).toBeGreaterThanOrEqual(backoffMs(POLICY, 1));
    expect(mine[2]!.at - mine[1]!.at).toBeGreaterThanOrEqual(backoffMs(POLICY, 2));
    // What each execution emitted is in the log, once, and the log ends with run.failed.
    const events = await eventsOf(created.id);
    expect(events.map((e) => e.type)).toEqual(['run.started', 'step', 'step', 'step', 'run.failed']);
    expect(events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(events.at(-1)?.payload).toEqual({ runId: created.id, error: run.error });
    expect(failedHook).toEqual([{ runId: created.id, error: run.error }]);
    // It stays failed: no later claim takes it.
    await new Promise((r) => setTimeout(r, 500));
    expect(executions.filter((e) => e.runId === created.id)).toHaveLength(3);
  });

  it('an executor that decides to fail is not retried', async () => {
    const { engine, executions } = await startEngine(async () => ({ status: 'failed', error: 'bad input' }));
    const created = await engine.createRun(em(), { workspaceId: ws.workspaceId, kind: 'autonomous' });
    const run = await ended(created.id);
    expect(run).toMatchObject({ status: 'failed', error: 'bad input', attempts: 1 });
    expect(executions.filter((e) => e.runId === created.id)).toHaveLength(1);
  });

  it('takes over a run whose worker died only after its lease plus the backoff', async () => {
    const runId = await orphan(1, 3);
    const [row] = await em().execute<{ lease_expires_at: Date }[]>(
      'select lease_expires_at from runs where id = ?',
      [runId],
    );
    const { executions } = await startEngine(async () => ({ status: 'completed' }));
    const run = await ended(runId);
    expect(run).toMatchObject({ status: 'completed', attempts: 2, error: null });
    const mine = executions.filter((e) => e.runId === runId);
    expect(mine).toHaveLength(1);
    expect(mine[0]!.at).toBeGreaterThanOrEqual(
      new Date(row!.lease_expires_at).getTime() + backoffMs(POLICY, 1),
    );
  });

  it('never executes a run whose worker died on its last attempt: the sweep fails it with the reason', async () => {
    const exhausted = await orphan(3, 3, 60_000);
    const single = await orphan(1, 1, 60_000);
    // No claim takes them, whichever process makes it (not only a sweep that ran first).
    expect(await runStore.claim(em(), 'another-worker', 3000, ['autonomous'], POLICY)).toBeNull();
    const { executions, failedHook } = await startEngine(async () => ({ status: 'completed' }));
    const a = await ended(exhausted);
    const b = await ended(single);
    expect(a).toMatchObject({ status: 'failed', attempts: 3, leaseOwner: null });
    expect(a.error).toBe(`${WORKER_LOST_ERROR}; giving up after 3 attempts`);
    // A run allowed one execution (a turn) ends with the plain reason.
    expect(b).toMatchObject({ status: 'failed', attempts: 1, error: WORKER_LOST_ERROR });
    expect(executions.filter((e) => e.runId === exhausted || e.runId === single)).toEqual([]);
    expect((await eventsOf(exhausted)).map((e) => [e.type, e.payload])).toEqual([
      ['run.failed', { runId: exhausted, error: a.error }],
    ]);
    expect(failedHook).toEqual(
      expect.arrayContaining([
        { runId: exhausted, error: a.error },
        { runId: single, error: WORKER_LOST_ERROR },
      ]),
    );
  });

  it('a run resumed after a tool call continues the same attempt', async () => {
    let own: RunEngine | undefined;
    const started = await startEngine(async (exec) => {
      if (exec.run.state) return { status: 'completed' };
      await exec.checkpoint({ asked: true });
      const call = await (own as RunEngine).createToolCall(exec.em(), {
        runId: exec.run.id,
        workspaceId: exec.run.workspaceId,
        sessionId: null,
        modelCallId: 'm1',
        name: 'ask_human',
        arguments: {},
        deadlineMs: 60_000,
      });
      await exec.emit('tool_call.pending', { toolCallId: call.id });
      return { status: 'waiting' };
    });
    own = started.engine;
    const created = await own.createRun(em(), { workspaceId: ws.workspaceId, kind: 'autonomous' });
    const callId = await waitFor(async () => {
      const calls = await toolCallStore.toolCallsOfRun(em(), created.id);
      const r = await runStore.getRun(em(), created.id);
      return r?.waiting && calls[0]?.id;
    }, 'the run to wait');
    await own.settleToolCall(callId, { result: 'yes' });
    const run = await ended(created.id);
    expect(run).toMatchObject({ status: 'completed', attempts: 1 });
    expect(started.executions.filter((e) => e.runId === created.id).map((e) => e.attempts)).toEqual([1, 1]);
  });
});
