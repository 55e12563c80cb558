import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WORKER_LOST_ERROR } from '../../runs/index.js';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServer,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import {
  createAgentWithSession,
  openTurn,
  postToolResult,
  readSse,
  sendMessage,
  TurnReader,
} from './test-helpers.js';

let a: TestServer & { fake: FakeOpenAI };
let b: TestServer;
let ws: TestWorkspace;

beforeAll(async () => {
  a = await startTestServerWithFakeModel({
    env: {
      RUN_POLL_INTERVAL_MS: '100',
      AGENT_TOOL_CALL_DEADLINE_MS: '60000',
      RATE_LIMIT_SESSION_CREATE: '1000',
      RATE_LIMIT_AGENT_MESSAGE: '1000',
    },
  });
  // A second server process on the same database (same fake model upstream).
  b = await startTestServer({
    db: a.db,
    env: {
      OPENAI_BASE_URL: a.fake.url,
      OPENAI_API_KEY: 'test',
      CHAT_MODEL: 'fake-chat',
      LLM_MAX_RETRIES: '0',
      RUN_POLL_INTERVAL_MS: '100',
    },
  });
  ws = await createTestWorkspace(a, { creditsUsd: '10' });
});
afterAll(async () => {
  await b?.close();
  await a?.close();
});

describe('cancel', () => {
  it('stops a streaming turn: no further deltas, run.cancelled last, usage recorded', async () => {
    const { sessionId } = await createAgentWithSession(a, ws.apiKey, { name: 'Cancelme' });
    a.fake.script({ text: 'x'.repeat(400), chunkSize: 2, paceMs: 20 });
    const turn = await openTurn(a, ws.apiKey, sessionId, { message: 'talk' });
    const started = await turn.until('run.started');
    const runId = started.data.runId as string;
    await turn.until('message.delta');
    const res = await a.api(`/managed-agents/sessions/${sessionId}/cancel`, {
      method: 'POST',
      key: ws.apiKey,
      json: { runId },
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ runId, status: 'cancelled' });
    const events = await turn.rest();
    expect(events.at(-1)?.data).toEqual({ type: 'run.cancelled', runId });
    expect(events.filter((e) => e.data.type === 'message.delta').length).toBeLessThan(200);
    expect(events.some((e) => e.data.type === 'message.completed')).toBe(false);

    // the upstream request was aborted and the partial usage recorded as aborted
    await expect.poll(() => a.fake.requests.at(-1)?.aborted).toBe(true);
    await expect
      .poll(async () => {
        const rows = await a.server.deps
          .em()
          .execute<any[]>('select provider_status from usage_records where run_id = ?', [runId]);
        return rows.map((r) => r.provider_status);
      })
      .toEqual(['aborted']);
    // nothing was appended after the terminal event
    const log = await a.server.deps
      .em()
      .execute<any[]>('select type from run_events where run_id = ? order by seq', [runId]);
    expect(log.at(-1)?.type).toBe('run.cancelled');

    const again = await a.api(`/managed-agents/sessions/${sessionId}/cancel`, {
      method: 'POST',
      key: ws.apiKey,
      json: { runId },
    });
    expect(again.status).toBe(400);
    expect(await again.json()).toEqual({ error: 'Run is cancelled' });
  });

  it('answers 400 Run is completed for a finished run and 400 when runId is missing', async () => {
    const { sessionId } = await createAgentWithSession(a, ws.apiKey, { name: 'Done' });
    a.fake.script({ text: 'done' });
    const events = await (await openTurn(a, ws.apiKey, sessionId, { message: 'x' })).rest();
    const runId = events[0]?.data.runId;
    let res = await a.api(`/managed-agents/sessions/${sessionId}/cancel`, {
      method: 'POST',
      key: ws.apiKey,
      json: { runId },
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: 'Run is completed' });
    res = await a.api(`/managed-agents/sessions/${sessionId}/cancel`, {
      method: 'POST',
      key: ws.apiKey,
      json: {},
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error).toBe('runId is required');
  });
});

describe('reconnect', () => {
  it('replays after Last-Event-ID without loss or duplicates, then tails to the end', async () => {
    const { sessionId } = await createAgentWithSession(a, ws.apiKey, {
      name: 'Reconnect',
      config: { customTools: [{ name: 'approve' }] },
    });
    a.fake.script(
      { toolCalls: [{ id: 'r1', name: 'approve', arguments: '{}' }] },
      { text: 'Approved and done.' },
    );
    const turn = await openTurn(a, ws.apiKey, sessionId, { message: 'go' });
    const runId = (await turn.until('run.started')).data.runId as string;
    const pending = await turn.until('tool_call.pending');
    await turn.close(); // the client drops
    await postToolResult(a, ws.apiKey, sessionId, { toolCallId: pending.data.toolCallId, result: true });

    const res = await a.api(`/managed-agents/sessions/${sessionId}/runs/${runId}/stream`, {
      key: ws.apiKey,
      headers: { 'last-event-id': String(pending.id) },
    });
    expect(res.status).toBe(200);
    const rest = new TurnReader(res);
    const after = await rest.rest();
    const ids = [...turn.events, ...after].map((e) => Number(e.id));
    expect(ids).toEqual(ids.map((_, i) => i + 1));
    expect(after[0]?.data.type).toBe('tool_call.completed');
    expect(after.at(-1)?.data.type).toBe('run.completed');

    // a full replay from the start, and 404 for a foreign run id
    const full = [];
    for await (const e of readSse(
      await a.api(`/managed-agents/sessions/${sessionId}/runs/${runId}/stream`, { key: ws.apiKey }),
    )) {
      full.push(e);
    }
    expect(full.map((e) => e.data.type)).toEqual([...turn.events, ...after].map((e) => e.data.type));
    const missing = await a.api(`/managed-agents/sessions/${sessionId}/runs/${randomUUID()}/stream`, {
      key: ws.apiKey,
    });
    expect(missing.status).toBe(404);
  });
});

describe('two server processes on one database', () => {
  it('a tool result posted to B resumes the turn streamed from A', async () => {
    const { sessionId } = await createAgentWithSession(a, ws.apiKey, {
      name: 'TwoNodes',
      config: { customTools: [{ name: 'ask_human' }] },
    });
    a.fake.script(
      { toolCalls: [{ id: 'h1', name: 'ask_human', arguments: '{"q":"ok?"}' }] },
      { text: 'Thanks, human.' },
    );
    const turn = await openTurn(a, ws.apiKey, sessionId, { message: 'ask' });
    const pending = await turn.until('tool_call.pending');
    const r = await postToolResult(b, ws.apiKey, sessionId, {
      toolCallId: pending.data.toolCallId,
      result: 'yes',
    });
    expect(r.body).toMatchObject({ accepted: true, status: 'completed' });
    const events = await turn.rest();
    expect(events.at(-1)?.data.type).toBe('run.completed');
    expect(events.find((e) => e.data.type === 'message.completed')?.data.content).toBe('Thanks, human.');
    // repeated on A: harmless, no second resume
    const again = await postToolResult(a, ws.apiKey, sessionId, {
      toolCallId: pending.data.toolCallId,
      result: 'no',
    });
    expect(again.body).toMatchObject({ accepted: false, status: 'completed' });
    const resumed = a.fake.requests.filter((q) =>
      (q.body.messages ?? []).some((m: any) => m.role === 'tool' && m.tool_call_id === 'h1'),
    );
    expect(resumed).toHaveLength(1);
    expect(resumed[0]?.body.messages.at(-1).content).toBe('"yes"');
  });
});

describe('deadlines and recovery', () => {
  it('resolves a forgotten integrator call as an error at its deadline, and the turn goes on', async () => {
    const { sessionId } = await createAgentWithSession(a, ws.apiKey, {
      name: 'Forgotten',
      config: { customTools: [{ name: 'never_answered' }] },
    });
    a.fake.script(
      { toolCalls: [{ id: 'n1', name: 'never_answered', arguments: '{}' }] },
      { text: 'Gave up waiting.' },
    );
    const turn = await openTurn(a, ws.apiKey, sessionId, { message: 'x' });
    const pending = await turn.until('tool_call.pending');
    const toolCallId = pending.data.toolCallId as string;
    // The deadline comes from AGENT_TOOL_CALL_DEADLINE_MS (60 s here); move it to the past
    // instead of waiting, whichever process created the call.
    expect(Date.parse(pending.data.deadline)).toBeGreaterThan(Date.now());
    await a.server.deps
      .em()
      .execute(`update tool_calls set deadline_at = now() - interval '1 second' where id = ?`, [toolCallId]);
    const events = await turn.rest();
    const types = events.map((e) => e.data.type);
    expect(types.slice(0, 3)).toEqual(['run.started', 'tool_call.pending', 'tool_call.completed']);
    expect(events[2]?.data).toMatchObject({ status: 'error', error: 'Tool call deadline expired' });
    expect(types.at(-1)).toBe('run.completed');
    expect(a.fake.requests.at(-1)?.body.messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'n1',
      content: '{"error":"Tool call deadline expired"}',
    });
    const late = await postToolResult(a, ws.apiKey, sessionId, { toolCallId, result: 'late' });
    expect(late.body).toMatchObject({ accepted: false, status: 'expired' });
  });

  it('fails a run whose worker died (lease expired), never leaving it running', async () => {
    const { agentId, sessionId } = await createAgentWithSession(a, ws.apiKey, { name: 'Orphan' });
    const runId = randomUUID();
    await a.server.deps.em().execute(
      `insert into runs (id, workspace_id, kind, status, app_id, session_id, serial_key, input, lease_owner,
         lease_expires_at, attempts, max_attempts, started_at)
       values (?, ?, 'turn', 'running', ?, ?, ?, '{"message":"x"}'::jsonb, 'dead-worker',
         now() - interval '1 minute', 1, 1, now())`,
      [runId, ws.workspaceId, agentId, sessionId, `session:${sessionId}`],
    );
    await a.server.deps.runs.bus.publish({ t: 'wake' });
    const res = await a.api(`/managed-agents/sessions/${sessionId}/runs/${runId}/stream`, { key: ws.apiKey });
    const events = await new TurnReader(res).rest();
    expect(events.at(-1)?.data).toEqual({ type: 'run.failed', runId, error: WORKER_LOST_ERROR });
    const rows = await a.server.deps
      .em()
      .execute<any[]>('select status, error from runs where id = ?', [runId]);
    expect(rows[0]).toEqual({ status: 'failed', error: WORKER_LOST_ERROR });
  });
});

describe('rate limits', () => {
  it('answers 429 Rate limit exceeded for session creation and agent messages', async () => {
    const limited = await startTestServerWithFakeModel({
      env: {
        RATE_LIMIT_SESSION_CREATE: '2',
        RATE_LIMIT_AGENT_MESSAGE: '1',
        // Fixed windows: with the default minute, calls that straddle a minute boundary land in
        // two windows and the third one passes (seen under load). A window of ~3 years never ends mid-test.
        RATE_LIMIT_WINDOW_SECONDS: '100000000',
        RUN_POLL_INTERVAL_MS: '100',
      },
    });
    try {
      const lws = await createTestWorkspace(limited, { creditsUsd: '1' });
      const { agentId, sessionId } = await createAgentWithSession(limited, lws.apiKey, { name: 'Limited' });
      await limited.api(`/managed-agents/agents/${agentId}/sessions`, {
        method: 'POST',
        key: lws.apiKey,
        json: {},
      });
      const res = await limited.api(`/managed-agents/agents/${agentId}/sessions`, {
        method: 'POST',
        key: lws.apiKey,
        json: {},
      });
      expect(res.status).toBe(429);
      expect(((await res.json()) as any).error).toBe('Rate limit exceeded');
      expect(res.headers.get('retry-after')).toEqual(expect.any(String));

      await (await openTurn(limited, lws.apiKey, sessionId, { message: 'one' })).rest();
      const second = await sendMessage(limited, lws.apiKey, sessionId, { message: 'two' });
      expect(second.status).toBe(429);
      expect(((await second.json()) as any).error).toBe('Rate limit exceeded');
    } finally {
      await limited.close();
    }
  });
});
