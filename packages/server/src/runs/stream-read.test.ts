import type { EntityManager } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAgentWithSession, openTurn } from '../domains/agents/test-helpers.js';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../test/harness.js';
import { RunBus, RunEngine, runStore } from './index.js';
import type { RunEvent } from './types.js';

// A reader in a process that does not execute the run reads the log from the database. These
// tests put another process's commit exactly between two moments of that reader: after its
// read of the log, before it looks at the result.
let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
});
afterAll(async () => {
  await ts?.close();
});

const GHOST = 'worker-in-another-process';

/**
 * A run held by another process's worker, cancelled while its worker still has events to
 * write (the state `runStore.cancel` leaves when a live worker holds the run). Returns the
 * last written seq.
 */
async function cancelledRunHeldElsewhere(): Promise<{ runId: string; lastSeq: number }> {
  const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
    name: 'Held elsewhere',
    config: { customTools: [{ name: 'wait_for_human' }] },
  });
  ts.fake.script({ toolCalls: [{ id: 'w1', name: 'wait_for_human', arguments: '{}' }] });
  const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'hold' });
  const runId = (await turn.until('run.started')).data.runId as string;
  await turn.until('tool_call.pending');
  const rows = await ts.server.deps.em().execute<{ last_seq: number }[]>(
    `update runs set status = 'cancelled', waiting = false, lease_owner = ?,
         lease_expires_at = now() + interval '1 minute' where id = ? returning last_seq`,
    [GHOST, runId],
  );
  return { runId, lastSeq: Number(rows[0]?.last_seq) };
}

/** An engine whose reads run `afterFirstRead` once, after the first statement that reads the log. */
function readerEngine(afterFirstRead: () => Promise<void>): RunEngine {
  let fired = false;
  const em = (): EntityManager => {
    const inner = ts.server.deps.em();
    return new Proxy(inner, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target);
        if (prop !== 'execute') return typeof value === 'function' ? value.bind(target) : value;
        return async (...args: Parameters<EntityManager['execute']>) => {
          const result = await target.execute(...args);
          if (!fired && String(args[0]).includes('run_events')) {
            fired = true;
            await afterFirstRead();
          }
          return result;
        };
      },
    });
  };
  const log = ts.server.deps.log;
  return new RunEngine({
    em,
    sql: ts.server.deps.db.sql,
    log,
    bus: new RunBus({ log, em }),
    pollMs: 50,
    concurrency: 0,
  });
}

async function collect(engine: RunEngine, runId: string, afterSeq: number): Promise<RunEvent[]> {
  const out: RunEvent[] = [];
  const signal = AbortSignal.timeout(10_000);
  for await (const e of engine.stream(runId, afterSeq, signal)) out.push(e);
  return out;
}

describe('a reader of the log in another process', () => {
  it('does not skip the events a cancelled run writes with run.cancelled after its read', async () => {
    const { runId, lastSeq } = await cancelledRunHeldElsewhere();
    const delta: RunEvent = {
      runId,
      seq: lastSeq + 1,
      type: 'message.delta',
      payload: { runId, delta: 'late but shown' },
      createdAt: new Date(),
    };
    // The worker writes its last event and run.cancelled in one transaction, right after the
    // reader found nothing new in a cancelled run.
    const engine = readerEngine(async () => {
      await runStore.finishCancel(ts.server.deps.em(), runId, GHOST, [delta]);
    });
    const events = await collect(engine, runId, lastSeq);
    expect(events.map((e) => [e.seq, e.type])).toEqual([
      [lastSeq + 1, 'message.delta'],
      [lastSeq + 2, 'run.cancelled'],
    ]);
  });

  it('ends with a terminal event behind its position (events handed out from memory, never written)', async () => {
    const { runId, lastSeq } = await cancelledRunHeldElsewhere();
    await runStore.finishCancel(ts.server.deps.em(), runId, GHOST);
    // A reader that was handed seqs up to lastSeq + 3 from memory by a worker that never wrote them.
    const events = await collect(
      readerEngine(async () => {}),
      runId,
      lastSeq + 3,
    );
    expect(events.map((e) => [e.seq, e.type])).toEqual([[lastSeq + 1, 'run.cancelled']]);
    expect(events[0]?.payload).toEqual({ runId });
  });

  it('waits for a cancelled run whose worker has not written run.cancelled yet', async () => {
    const { runId, lastSeq } = await cancelledRunHeldElsewhere();
    const engine = readerEngine(async () => {});
    const reading = collect(engine, runId, lastSeq);
    await new Promise((r) => setTimeout(r, 300));
    await runStore.finishCancel(ts.server.deps.em(), runId, GHOST);
    const events = await reading;
    expect(events.map((e) => [e.seq, e.type])).toEqual([[lastSeq + 1, 'run.cancelled']]);
  });
});
