import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GenerationMeter } from '../../metering/types.js';
import { runStore } from '../../runs/index.js';
import {
  createTestWorkspace,
  creditBalance,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { turnFinalWrites } from './runtime.js';
import { createAgentWithSession, openTurn } from './test-helpers.js';

/**
 * The end of a turn that answered (decisions 0021 and 0029): the assistant message,
 * `message.completed`, the run's status and its terminal event commit in one transaction, only
 * while the worker holds the lease; the model call's settlement and usage record are one
 * statement beside it, written whatever happened to the run, before the terminal event is shown.
 */

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RUN_POLL_INTERVAL_MS: '100' } });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
});
afterAll(async () => {
  await ts?.close();
});

const sql = <T = Record<string, any>>(q: string, params: unknown[] = []) =>
  ts.server.deps.em().execute<T[]>(q, params);

/**
 * A run of the session, leased by `owner` (as a worker's admission leaves it). Inserted and
 * leased in one transaction: a pending run committed on its own could be claimed by this
 * server's worker first, which would then run it (and settle a model call of its own).
 */
async function leasedRun(sessionId: string, owner: string, status = 'running') {
  const [s] = await sql<{ app_id: string }>('select app_id from agent_sessions where id = ?', [sessionId]);
  const run = await ts.server.deps.em().transactional(async (tx) => {
    const inserted = await runStore.insertRun(tx, {
      workspaceId: ws.workspaceId,
      kind: 'turn',
      appId: s?.app_id,
      sessionId,
      serialKey: `session:${sessionId}`,
      input: { message: 'hi', requestId: `req-${randomUUID()}` },
    });
    await tx.execute(
      `update runs set status = ?, lease_owner = ?, lease_expires_at = now() + interval '1 minute' where id = ?`,
      [status, owner, inserted.id],
    );
    return inserted;
  });
  return { ...run, status: status as 'running', leaseOwner: owner };
}

/** A credit hold as a turn's model call takes it, with a reply of `chars` streamed into it. */
async function heldMeter(run: { id: string; sessionId: string | null; input: Record<string, unknown> }) {
  const meter = (await ts.server.deps.poolMetering.startGeneration(
    {
      workspaceId: ws.workspaceId,
      apiKeyId: ws.keyId,
      appId: null,
      sessionId: run.sessionId,
      runId: run.id,
      requestId: String(run.input.requestId),
      endpoint: '/managed-agents/sessions/{sessionId}/messages',
      model: ts.server.deps.models.resolve('chat', 'fake-chat'),
      meter: 'credits',
    },
    { inputTokens: 40 },
  )) as GenerationMeter;
  meter.addUsage({ inputTokens: 40, outputTokens: 25, estimated: false });
  return meter;
}

describe('the end of a turn in one statement', () => {
  it('writes the message, message.completed and the terminal event in one transaction, the settlement in one more', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'One statement' });
    ts.fake.script({
      text: 'All in one go.',
      chunkSize: 4,
      usage: { prompt_tokens: 30, completion_tokens: 7 },
    });
    const before = await creditBalance(ts, ws.workspaceId);
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'Hi' })).rest();
    const runId = events[0]?.data.runId as string;
    expect(events.map((e) => e.data.type).slice(-2)).toEqual(['message.completed', 'run.completed']);
    const completed = events.at(-2)?.data as { messageId: string; content: string };
    expect(completed.content).toBe('All in one go.');

    // Rows a transaction writes carry its id (xmin): one id for all of them.
    const xids = {
      events: await sql<{ x: string }>(
        `select xmin::text as x from run_events where run_id = ? and type in ('message.completed', 'run.completed')`,
        [runId],
      ),
      run: await sql<{ x: string }>(`select xmin::text as x from runs where id = ?`, [runId]),
      message: await sql<{ x: string }>(
        `select xmin::text as x from session_messages where id = ? and role = 'assistant' and run_id = ?`,
        [completed.messageId, runId],
      ),
      usage: await sql<{ x: string }>(`select xmin::text as x from usage_records where run_id = ?`, [runId]),
    };
    const [run] = await sql<{ input: { requestId: string } }>('select input from runs where id = ?', [runId]);
    const ledger = await sql<{ x: string; kind: string }>(
      `select xmin::text as x, kind from credit_ledger where ref = ? order by created_at, kind`,
      [run?.input.requestId],
    );
    expect(xids.events).toHaveLength(2);
    expect(xids.message).toHaveLength(1);
    expect(xids.usage).toHaveLength(1);
    const xid = xids.run[0]?.x;
    expect([...xids.events.map((r) => r.x), xids.message[0]?.x]).toEqual(Array(3).fill(xid));
    // Two ledger lines: the hold, taken before the first token, and the settlement, at the end,
    // written with the usage record.
    expect(ledger).toHaveLength(2);
    const settled = ledger.filter((l) => l.x === xids.usage[0]?.x);
    expect(settled).toHaveLength(1);
    expect(settled[0]?.x).not.toBe(xid);

    // The settlement is right: 30 × $1 + 7 × $2 per million, and no hold is left.
    const [usage] = await sql<{ cost_micros: string; provider_status: string }>(
      'select cost_micros, provider_status from usage_records where run_id = ?',
      [runId],
    );
    expect(usage).toMatchObject({ provider_status: 'success' });
    expect(Number(usage?.cost_micros)).toBe(44);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before - 44);
    expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toEqual([]);
  });

  it('a lost lease writes nothing of the run, and the hold is settled all the same', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Lost lease' });
    const run = await leasedRun(sessionId, 'worker-other');
    const before = await creditBalance(ts, ws.workspaceId);
    const meter = await heldMeter(run);
    const cost = meter.costMicros();
    expect(cost).toBe(40 + 2 * 25);
    const final = turnFinalWrites(run, 'never stored', meter, ts.server.deps.db.sql, ts.server.deps.log);
    const pending = [{ runId: run.id, seq: 1, type: 'message.delta', payload: {}, createdAt: new Date() }];
    const res = await runStore.finishOwned(
      ts.server.deps.db.sql,
      run.id,
      'worker-me',
      'completed',
      {},
      null,
      pending,
      final,
    );
    expect(res.owned).toBe(false);
    expect(res.terminal).toBeNull();
    await final.beside?.();
    expect(await sql('select 1 from run_events where run_id = ?', [run.id])).toEqual([]);
    expect(await sql('select 1 from session_messages where run_id = ?', [run.id])).toEqual([]);
    const [r] = await sql<{ status: string; lease_owner: string }>(
      'select status, lease_owner from runs where id = ?',
      [run.id],
    );
    expect(r).toEqual({ status: 'running', lease_owner: 'worker-other' });
    // Settled: the balance paid the cost and no more, the usage record is there, no hold left.
    const [usage] = await sql<{ cost_micros: string }>(
      'select cost_micros from usage_records where run_id = ?',
      [run.id],
    );
    expect(Number(usage?.cost_micros)).toBe(cost);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before - cost);
    expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toEqual([]);
    // `finish` after the statement is a no-op: nothing is settled or recorded twice.
    await meter.finish('success');
    expect(await sql('select 1 from usage_records where run_id = ?', [run.id])).toHaveLength(1);
  });

  it('a run cancelled meanwhile keeps its message and events for run.cancelled to follow', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Cancelled' });
    const run = await leasedRun(sessionId, 'worker-me', 'cancelled');
    const meter = await heldMeter(run);
    const final = turnFinalWrites(
      run,
      'stored before the cancel',
      meter,
      ts.server.deps.db.sql,
      ts.server.deps.log,
    );
    const pending = [
      { runId: run.id, seq: 1, type: 'message.completed', payload: {}, createdAt: new Date() },
    ];
    const res = await runStore.finishOwned(
      ts.server.deps.db.sql,
      run.id,
      'worker-me',
      'completed',
      {},
      null,
      pending,
      final,
    );
    expect(res.owned).toBe(true);
    expect(res.terminal).toBeNull();
    await final.beside?.();
    expect(await sql('select type from run_events where run_id = ?', [run.id])).toEqual([
      { type: 'message.completed' },
    ]);
    expect(await sql('select content from session_messages where run_id = ?', [run.id])).toEqual([
      { content: 'stored before the cancel' },
    ]);
    const ended = await runStore.finishCancel(ts.server.deps.em(), run.id, 'worker-me');
    expect(ended).toMatchObject({ seq: 2, type: 'run.cancelled' });
    expect(await sql('select 1 from usage_records where run_id = ?', [run.id])).toHaveLength(1);
    expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toEqual([]);
  });
});
