import { type ChildProcess, fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
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
import { createAgentWithSession, openTurn, type SseEvent, TurnReader } from './test-helpers.js';

/**
 * The replay rule of the event path (docs/run-engine.md, "Streams"): events are handed to
 * readers of the executing process from memory and written in batches, yet every reader —
 * one that connects mid-turn, one that reconnects after a gap with Last-Event-ID, one on
 * another process (NOTIFY on the server database) — gets the same gapless log, and the text
 * of its deltas is exactly the final assistant message. A killed worker still ends the turn
 * in run.failed after the lease; a cancel still stops the upstream call.
 */

const here = path.dirname(fileURLToPath(import.meta.url));
let fake: FakeOpenAI;
let api: TestServer; // HTTP only (RUN_WORKER_CONCURRENCY=0): reads what other processes execute
let ws: TestWorkspace;
const children: ChildProcess[] = [];
const tmpDirs: string[] = [];

const LONG = 'The quick brown fox jumps over the lazy dog. '.repeat(8); // 360 chars

const serverDb = () => api.db.databaseUrl !== undefined;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  api = await startTestServer({
    env: {
      ...fakeOpenAIEnv(fake),
      RUN_WORKER_CONCURRENCY: '0',
      // On the server database this reader wakes on NOTIFY only: a poll this slow would time the test out.
      RUN_POLL_INTERVAL_MS: process.env.DATABASE_URL ? '60000' : '50',
      RATE_LIMIT_SESSION_CREATE: '1000',
      RATE_LIMIT_AGENT_MESSAGE: '1000',
    },
  });
  ws = await createTestWorkspace(api, { creditsUsd: '10' });
});

afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

afterAll(async () => {
  await api?.close();
  await fake?.close();
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

const deltaText = (events: SseEvent[]) =>
  events
    .filter((e) => e.data.type === 'message.delta')
    .map((e) => e.data.content as string)
    .join('');

async function dbLog(runId: string) {
  return api.server.deps
    .em()
    .execute<{ seq: number; type: string; payload: any }[]>(
      'select seq, type, payload from run_events where run_id = ? order by seq',
      [runId],
    );
}

async function reconnect(ts: TestServer, sessionId: string, runId: string, lastEventId?: string) {
  const res = await ts.api(`/managed-agents/sessions/${sessionId}/runs/${runId}/stream`, {
    key: ws.apiKey,
    headers: lastEventId ? { 'last-event-id': lastEventId } : {},
  });
  expect(res.status).toBe(200);
  return new TurnReader(res);
}

/** Reads until `n` deltas were seen. */
async function readDeltas(turn: TurnReader, n: number) {
  for (let i = 0; i < n; i++) await turn.until('message.delta');
}

function expectGapless(events: SseEvent[], from = 1) {
  const ids = events.map((e) => Number(e.id));
  expect(ids).toEqual(ids.map((_, i) => i + from));
}

/** Another OS process running the server (workers included) on the same database. */
async function spawnWorker(env: Record<string, string> = {}): Promise<ChildProcess> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-stream-'));
  tmpDirs.push(dataDir);
  const dbEnv: Record<string, string> = {};
  if (api.db.databaseUrl) dbEnv.DATABASE_URL = api.db.databaseUrl;
  else {
    const emb = api.db.embedded as NonNullable<TestServer['db']['embedded']>;
    fs.writeFileSync(
      path.join(dataDir, 'embedded-pg.lock.json'),
      JSON.stringify({ pid: process.pid, socketDir: emb.socketDir, port: emb.port, startedAt: '' }),
    );
  }
  const child = fork(path.join(here, '../runs/worker-child.fixture.ts'), [], {
    execArgv: ['--import', 'tsx'],
    cwd: path.resolve(here, '../../..'),
    env: {
      PATH: process.env.PATH ?? '',
      LOG_LEVEL: 'silent',
      DATA_DIR: dataDir,
      ...fakeOpenAIEnv(fake),
      RUN_POLL_INTERVAL_MS: '50',
      RUN_LEASE_MS: '20000',
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

describe('one process: memory after the durable horizon', () => {
  let node: TestServer;
  beforeAll(async () => {
    node = await startTestServer({
      db: api.db,
      // The run limits are the defaults (RUN_WORKER_CONCURRENCY, RUN_TURN_CONCURRENCY unset).
      env: {
        ...fakeOpenAIEnv(fake),
        RUN_POLL_INTERVAL_MS: '50',
        RATE_LIMIT_AGENT_MESSAGE: '1000',
        RATE_LIMIT_SESSION_CREATE: '1000',
      },
    });
  });
  afterAll(async () => {
    await node?.close();
  });

  it('a reader that connects mid-turn gets the whole log; its text is the final message', async () => {
    const { sessionId } = await createAgentWithSession(node, ws.apiKey, { name: 'Mid-turn' });
    fake.script({ text: LONG, chunkSize: 4, paceMs: 10 });
    const first = await openTurn(node, ws.apiKey, sessionId, { message: 'talk' });
    const runId = (await first.until('run.started')).data.runId as string;
    await readDeltas(first, 10);
    const late = await reconnect(node, sessionId, runId);
    const [a, b] = await Promise.all([first.rest(), late.rest()]);
    expectGapless(a);
    expectGapless(b);
    expect(b.map((e) => e.data)).toEqual(a.map((e) => e.data));
    const completed = a.find((e) => e.data.type === 'message.completed');
    expect(deltaText(a)).toBe(LONG);
    expect(completed?.data.content).toBe(LONG);
    expect(a.at(-1)?.data.type).toBe('run.completed');
    // The database holds exactly what was streamed, the final message before the terminal event.
    const log = await dbLog(runId);
    expect(log.map((r) => r.type)).toEqual(a.map((e) => e.data.type));
    expect(log.map((r) => r.seq)).toEqual(a.map((e) => Number(e.id)));
    const msg = await api.server.deps
      .em()
      .execute<any[]>(`select content from session_messages where run_id = ? and role = 'assistant'`, [
        runId,
      ]);
    expect(msg.map((m) => m.content)).toEqual([LONG]);
  });

  it('admits one of many concurrent turns of a session (reject), started by the admitting process', async () => {
    const { sessionId } = await createAgentWithSession(node, ws.apiKey, { name: 'Race' });
    fake.script({ text: LONG, chunkSize: 8, paceMs: 10 });
    const responses = await Promise.all(
      Array.from({ length: 8 }, () =>
        node.api(`/managed-agents/sessions/${sessionId}/messages`, {
          method: 'POST',
          key: ws.apiKey,
          json: { message: 'race' },
        }),
      ),
    );
    const ok = responses.filter((r) => r.status === 200);
    expect(ok).toHaveLength(1);
    for (const r of responses.filter((x) => x.status !== 200)) {
      expect(r.status).toBe(409);
      expect(((await r.json()) as any).code).toBe('TURN_IN_PROGRESS');
    }
    const events = await new TurnReader(ok[0] as Response).rest();
    expect(events.at(-1)?.data).toMatchObject({ type: 'run.completed' });
    const runs = await api.server.deps
      .em()
      .execute<any[]>('select status, lease_owner, attempts from runs where session_id = ?', [sessionId]);
    expect(runs).toEqual([{ status: 'completed', lease_owner: null, attempts: 1 }]);
    const users = await api.server.deps
      .em()
      .execute<any[]>(
        `select count(*)::int as n from session_messages where session_id = ? and role = 'user'`,
        [sessionId],
      );
    expect(users[0]?.n).toBe(1);
  });

  it('starts 50 concurrent turns at once with the default limits: none waits for another to end', {
    timeout: 180_000,
  }, async () => {
    const N = 50;
    const a = await node.api('/managed-agents/agents', {
      method: 'POST',
      key: ws.apiKey,
      json: { name: 'Crowd' },
    });
    const agentId = ((await a.json()) as any).agent.id as string;
    const sessions = await Promise.all(
      Array.from({ length: N }, async () => {
        const s = await node.api(`/managed-agents/agents/${agentId}/sessions`, {
          method: 'POST',
          key: ws.apiKey,
          json: {},
        });
        expect(s.status).toBe(201);
        return ((await s.json()) as any).session.id as string;
      }),
    );
    // Every reply is held open after its first byte until all N model calls are under way: with
    // turns queued behind a smaller pool, the calls beyond it would never start and this fails.
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    fake.reset(); // nothing left scripted by an earlier test may answer these calls
    const before = fake.requests.length;
    fake.script(...Array.from({ length: N }, () => ({ text: 'all at once', chunkSize: 4, waitFor: gate })));
    try {
      const turns = await Promise.all(sessions.map((s) => openTurn(node, ws.apiKey, s, { message: 'go' })));
      await Promise.all(turns.map((t) => t.until('run.started')));
      await vi.waitFor(() => expect(fake.requests.length - before).toBe(N), {
        timeout: 120_000,
        interval: 50,
      });
      expect(fake.requests.slice(before).filter((r) => r.completed)).toHaveLength(0);
      const running = await api.server.deps.em().execute<{ n: number }[]>(
        `select count(*)::int as n from runs where session_id in (${sessions.map(() => '?').join(', ')})
             and status = 'running'`,
        sessions,
      );
      expect(running[0]?.n).toBe(N);
      release();
      for (const events of await Promise.all(turns.map((t) => t.rest()))) {
        expect(events.at(-1)?.data.type).toBe('run.completed');
        expect(deltaText(events)).toBe('all at once');
      }
    } finally {
      release();
    }
  });

  it('a reader that reconnects after a gap with Last-Event-ID gets exactly what it missed', async () => {
    const { sessionId } = await createAgentWithSession(node, ws.apiKey, { name: 'Gap' });
    fake.script({ text: LONG, chunkSize: 4, paceMs: 10 });
    const first = await openTurn(node, ws.apiKey, sessionId, { message: 'talk' });
    const runId = (await first.until('run.started')).data.runId as string;
    await readDeltas(first, 5);
    await first.close(); // the client drops
    await new Promise((r) => setTimeout(r, 150));
    const lastId = first.events.at(-1)?.id as string;
    const rest = await (await reconnect(node, sessionId, runId, lastId)).rest();
    const all = [...first.events, ...rest];
    expectGapless(all);
    expect(deltaText(all)).toBe(LONG);
    expect(all.at(-1)?.data.type).toBe('run.completed');
    // After the end, the same position replays the same events from the database.
    const again = await (await reconnect(api, sessionId, runId, lastId)).rest();
    expect(again.map((e) => [e.id, e.data])).toEqual(rest.map((e) => [e.id, e.data]));
  });
});

// Each child process loads the whole server through tsx: slow on a shared machine.
describe('readers and workers in different processes', { timeout: 240_000 }, () => {
  it('a reader on another process follows the turn (NOTIFY on the server database)', async () => {
    const child = await spawnWorker();
    const { sessionId } = await createAgentWithSession(api, ws.apiKey, { name: 'Remote' });
    fake.script({ text: LONG, chunkSize: 4, paceMs: 10 });
    const turn = await openTurn(api, ws.apiKey, sessionId, { message: 'talk' });
    const runId = (await turn.until('run.started')).data.runId as string;
    await readDeltas(turn, 3);
    const mid = await reconnect(api, sessionId, runId, turn.events.at(-1)?.id);
    const [events, midEvents] = await Promise.all([turn.rest(), mid.rest()]);
    expectGapless(events);
    expect(deltaText(events)).toBe(LONG);
    expect(events.at(-1)?.data.type).toBe('run.completed');
    expect(midEvents.map((e) => e.data)).toEqual(events.slice(4).map((e) => e.data));
    const log = await dbLog(runId);
    expect(log.map((r) => r.seq)).toEqual(events.map((e) => Number(e.id)));
    if (serverDb()) {
      // Batched: far fewer NOTIFY-woken reads than events (one per batch, not per delta).
      expect(events.length).toBeGreaterThan(40);
    }
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  });

  it('kill -9 mid-turn: the reader ends with run.failed after the lease, having seen only written events', async () => {
    const child = await spawnWorker({ RUN_LEASE_MS: '2000' });
    const { sessionId } = await createAgentWithSession(api, ws.apiKey, { name: 'Killed' });
    fake.script({ text: LONG.repeat(4), chunkSize: 4, paceMs: 20 });
    const turn = await openTurn(api, ws.apiKey, sessionId, { message: 'talk' });
    const runId = (await turn.until('run.started')).data.runId as string;
    await readDeltas(turn, 3);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    // A worker finds the expired lease.
    const worker = await startTestServer({
      db: api.db,
      env: { ...fakeOpenAIEnv(fake), RUN_POLL_INTERVAL_MS: '50' },
    });
    try {
      const events = await turn.rest();
      expect(events.at(-1)?.data).toEqual({ type: 'run.failed', runId, error: WORKER_LOST_ERROR });
      expectGapless(events);
      const log = await dbLog(runId);
      expect(log.map((r) => [r.seq, r.type])).toEqual(events.map((e) => [Number(e.id), e.data.type]));
      const rows = await api.server.deps.em().execute<any[]>('select status from runs where id = ?', [runId]);
      expect(rows[0]?.status).toBe('failed');
    } finally {
      await worker.close();
    }
  });

  it('cancel from another process stops the upstream call; run.cancelled comes after every shown event', async () => {
    const child = await spawnWorker();
    const { sessionId } = await createAgentWithSession(api, ws.apiKey, { name: 'Cancelled' });
    fake.script({ text: LONG.repeat(4), chunkSize: 2, paceMs: 20 });
    const turn = await openTurn(api, ws.apiKey, sessionId, { message: 'talk' });
    const runId = (await turn.until('run.started')).data.runId as string;
    await readDeltas(turn, 3);
    const res = await api.api(`/managed-agents/sessions/${sessionId}/cancel`, {
      method: 'POST',
      key: ws.apiKey,
      json: { runId },
    });
    expect(res.status).toBe(200);
    const events = await turn.rest();
    expect(events.at(-1)?.data).toEqual({ type: 'run.cancelled', runId });
    expectGapless(events);
    await expect.poll(() => fake.requests.at(-1)?.aborted, { timeout: 10_000 }).toBe(true);
    expect(deltaText(events).length).toBeLessThan(LONG.length * 4);
    const log = await dbLog(runId);
    expect(log.map((r) => [r.seq, r.type])).toEqual(events.map((e) => [Number(e.id), e.data.type]));
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  });
});
