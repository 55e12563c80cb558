import { createHmac } from 'node:crypto';
import { type HttpFixture, startHttpFixture, startTestMcpServer } from '@ai-suite/testkit';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  fakeOpenAIEnv,
  startTestServer,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { createAgentWithSession, openTurn, postToolResult, sendMessage, TurnReader } from './test-helpers.js';

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let other: TestWorkspace;
let callbacks: HttpFixture;
let callbackReply: (body: any) => { status?: number; body?: unknown } = () => ({
  body: { result: { ok: true } },
});

beforeAll(async () => {
  // Like Python's http.server: reads Content-Length bytes, answers 411 to a chunked body.
  callbacks = await startHttpFixture((req) => callbackReply(req.body), { requireContentLength: true });
  ts = await startTestServerWithFakeModel({
    env: { OUTBOUND_ALLOWLIST: '127.0.0.1', RUN_POLL_INTERVAL_MS: '100' },
  });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  other = await createTestWorkspace(ts, { creditsUsd: '10' });
});
afterAll(async () => {
  await ts?.close();
  await callbacks?.close();
});

describe('a plain turn', () => {
  it('streams run.started, deltas, message.completed, run.completed with ids and event names', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Plain',
      prompt: 'You are terse.',
    });
    ts.fake.script({ text: 'Hello there, friend.', chunkSize: 5 });
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Hi' });
    expect(turn.res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(turn.res.headers.get('cache-control')).toBe('no-cache');
    const events = await turn.rest();
    const types = events.map((e) => e.data.type);
    expect(types[0]).toBe('run.started');
    expect(types.at(-1)).toBe('run.completed');
    // Four chunks written at once: the first goes out at once, the rest merged over the window.
    const deltaCount = types.filter((t) => t === 'message.delta').length;
    expect(deltaCount).toBeGreaterThanOrEqual(1);
    expect(deltaCount).toBeLessThanOrEqual(4);
    expect(types.at(-2)).toBe('message.completed');
    events.forEach((e, i) => {
      expect(e.id).toBe(String(i + 1));
      expect(e.event).toBe(e.data.type);
    });
    const runId = events[0]?.data.runId;
    expect(events[0]?.data).toEqual({ type: 'run.started', runId, sessionId });
    const deltas = events.filter((e) => e.data.type === 'message.delta').map((e) => e.data.content);
    expect(deltas.join('')).toBe('Hello there, friend.');
    expect(events.at(-2)?.data).toMatchObject({ runId, content: 'Hello there, friend.' });

    // the system prompt and the message went upstream
    const sent = ts.fake.requests.at(-1)?.body;
    expect(sent.messages).toEqual([
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hi' },
    ]);

    const timeline = await ts.api(`/managed-agents/sessions/${sessionId}/events`, { key: ws.apiKey });
    const { events: tl } = (await timeline.json()) as { events: any[] };
    expect(tl.map((e) => e.type)).toEqual(['turn_run', 'message', 'message']);
    expect(tl[0]).toMatchObject({ id: runId, status: 'completed', error_message: null });
    expect(tl[0].completed_at).toEqual(expect.any(String));
    expect(tl[1]).toMatchObject({ role: 'user', content: 'Hi', metadata: {} });
    expect(tl[2]).toMatchObject({ role: 'assistant', content: 'Hello there, friend.' });
    const times = tl.map((e) => Date.parse(e.created_at));
    expect(times).toEqual([...times].sort((a, b) => a - b));

    const session = await ts.api(`/managed-agents/sessions/${sessionId}`, { key: ws.apiKey });
    expect(((await session.json()) as any).session.last_message_at).toEqual(expect.any(String));
  });

  it('answers 400 message is required, 404 for a foreign session', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Validation' });
    for (const body of [{}, { message: '' }, { message: '  ' }]) {
      const res = await sendMessage(ts, ws.apiKey, sessionId, body);
      expect(res.status).toBe(400);
      expect(((await res.json()) as any).error).toBe('message is required');
    }
    const res = await sendMessage(ts, other.apiKey, sessionId, { message: 'hi' });
    expect(res.status).toBe(404);
  });

  it('answers 402 before streaming when the workspace has no credits', async () => {
    const broke = await createTestWorkspace(ts);
    const { sessionId } = await createAgentWithSession(ts, broke.apiKey, { name: 'Broke' });
    const res = await sendMessage(ts, broke.apiKey, sessionId, { message: 'hi' });
    expect(res.status).toBe(402);
    expect(await res.json()).toEqual({
      error: 'Insufficient credits. Please purchase additional credits to continue.',
      code: 'INSUFFICIENT_CREDITS',
    });
  });

  it('uses the per-turn model override and rejects an unknown model', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Override' });
    const res = await sendMessage(ts, ws.apiKey, sessionId, { message: 'hi', model: 'no-such-model' });
    expect(res.status).toBe(400);
    ts.fake.script({ text: 'ok' });
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'hi', model: 'fake-chat' });
    expect((await turn.rest()).at(-1)?.data.type).toBe('run.completed');
  });

  it('records usage per model call and debits credits', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Usage' });
    ts.fake.script({ text: 'counted', usage: { prompt_tokens: 100, completion_tokens: 50 } });
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'hi' });
    const events = await turn.rest();
    const runId = events[0]?.data.runId;
    const rows = await ts.server.deps
      .em()
      .execute<any[]>('select * from usage_records where run_id = ?', [runId]);
    expect(rows).toHaveLength(1);
    expect(Number(rows[0].input_tokens)).toBe(100);
    expect(Number(rows[0].output_tokens)).toBe(50);
    expect(Number(rows[0].cost_micros)).toBe(200);
    expect(rows[0].session_id).toBe(sessionId);
  });
});

describe('coalesced deltas', () => {
  const REPLY = Array.from({ length: 20 }, (_, i) => `w${String(i).padStart(2, '0')} `);

  async function deltasOf(server: TestServer, key: string) {
    const { sessionId } = await createAgentWithSession(server, key, { name: 'Paced' });
    // 20 chunks, one every 10 ms: each arrives in a read of its own.
    ts.fake.script({ text: REPLY, paceMs: 10 });
    const events = await (await openTurn(server, key, sessionId, { message: 'Go' })).rest();
    return { sessionId, events, deltas: events.filter((e) => e.data.type === 'message.delta') };
  }

  it('merges the deltas of a reply over the window: the first at once, the text exactly the reply', async () => {
    // A window far longer than the reply (20 chunks 10 ms apart), so that however late a loaded
    // machine delivers the chunks, the reply after its first delta fits in one or two windows.
    const windowed = await startTestServer({
      db: ts.db,
      env: { ...fakeOpenAIEnv(ts.fake), AGENT_STREAM_COALESCE_MS: '5000' },
    });
    try {
      const { sessionId, events, deltas } = await deltasOf(windowed, ws.apiKey);
      expect(deltas.length).toBeGreaterThanOrEqual(2);
      expect(deltas.length).toBeLessThanOrEqual(3);
      expect(deltas[0]?.data.content).toBe(REPLY[0]);
      expect(deltas.map((e) => e.data.content).join('')).toBe(REPLY.join(''));
      expect(events.at(-2)?.data).toMatchObject({ type: 'message.completed', content: REPLY.join('') });
      // The replayed log is the streamed one, event for event.
      const runId = events[0]?.data.runId as string;
      const replay = await windowed.api(`/managed-agents/sessions/${sessionId}/runs/${runId}/stream`, {
        key: ws.apiKey,
      });
      const replayed = await new TurnReader(replay).rest();
      expect(replayed.map((e) => [e.id, e.data])).toEqual(events.map((e) => [e.id, e.data]));
    } finally {
      await windowed.close();
    }
  });

  it('AGENT_STREAM_COALESCE_MS=0 hands on every chunk of the model as it comes', async () => {
    const plain = await startTestServer({
      db: ts.db,
      env: { ...fakeOpenAIEnv(ts.fake), AGENT_STREAM_COALESCE_MS: '0' },
    });
    try {
      const { deltas } = await deltasOf(plain, ws.apiKey);
      expect(deltas.map((e) => e.data.content)).toEqual(REPLY);
    } finally {
      await plain.close();
    }
  });
});

describe('integrator-owned tools', () => {
  it('pauses on tool_call.pending and resumes when the result is posted', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Hitl',
      config: {
        customTools: [
          {
            name: 'lookup_order',
            description: 'Looks up an order',
            inputSchema: { type: 'object', properties: { id: { type: 'string' } } },
          },
        ],
      },
    });
    ts.fake.script(
      { toolCalls: [{ id: 'm1', name: 'lookup_order', arguments: '{"id":"A-1"}' }] },
      { text: 'Your order shipped.' },
    );
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Where is A-1?' });
    const pending = await turn.until('tool_call.pending');
    expect(pending.data).toMatchObject({ name: 'lookup_order', arguments: { id: 'A-1' } });
    const toolCallId = pending.data.toolCallId as string;
    // the tool definition went upstream
    expect(ts.fake.requests.at(-1)?.body.tools[0].function.name).toBe('lookup_order');

    // validation and ownership
    let r = await postToolResult(ts, ws.apiKey, sessionId, { toolCallId, result: 1, error: 'x' });
    expect(r.status).toBe(400);
    r = await postToolResult(ts, ws.apiKey, sessionId, { toolCallId });
    expect(r.status).toBe(400);
    r = await postToolResult(ts, ws.apiKey, sessionId, { result: 1 });
    expect(r).toMatchObject({ status: 400, body: { error: 'toolCallId is required' } });
    r = await postToolResult(ts, ws.apiKey, sessionId, { toolCallId: 'call_nope', result: 1 });
    expect(r).toEqual({ status: 404, body: { error: 'Unknown toolCallId' } });
    const { sessionId: otherSession } = await createAgentWithSession(ts, ws.apiKey, { name: 'Other' });
    r = await postToolResult(ts, ws.apiKey, otherSession, { toolCallId, result: 1 });
    expect(r).toEqual({ status: 403, body: { error: 'toolCallId does not belong to session' } });
    const { sessionId: foreignSession } = await createAgentWithSession(ts, other.apiKey, { name: 'Foreign' });
    r = await postToolResult(ts, other.apiKey, foreignSession, { toolCallId, result: 1 });
    expect(r.status).toBe(404);

    r = await postToolResult(ts, ws.apiKey, sessionId, { toolCallId, result: { status: 'shipped' } });
    expect(r).toEqual({ status: 200, body: { accepted: true, sessionId, toolCallId, status: 'completed' } });
    const events = await turn.rest();
    // Consecutive deltas read as one (how many there are depends on the window and the reads).
    const types = events
      .map((e) => e.data.type)
      .filter((t, i, all) => t !== 'message.delta' || all[i - 1] !== t);
    expect(types).toEqual([
      'run.started',
      'tool_call.pending',
      'tool_call.completed',
      'message.delta',
      'message.completed',
      'run.completed',
    ]);
    const text = events.filter((e) => e.data.type === 'message.delta').map((e) => e.data.content);
    expect(text.join('')).toBe(events.at(-2)?.data.content);
    expect(events[2]?.data).toMatchObject({ toolCallId, status: 'completed', result: { status: 'shipped' } });
    // the model saw the result
    const second = ts.fake.requests.at(-1)?.body;
    expect(second.messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'm1',
      content: '{"status":"shipped"}',
    });
    // the timeline keeps the call's arguments next to its result
    const timeline = await ts.api(`/managed-agents/sessions/${sessionId}/events`, { key: ws.apiKey });
    const tool = ((await timeline.json()) as { events: any[] }).events.find((e) => e.role === 'tool');
    expect(tool).toMatchObject({
      content: '{"status":"shipped"}',
      metadata: { toolCallId, name: 'lookup_order', arguments: { id: 'A-1' } },
    });

    // a repeated post is harmless
    r = await postToolResult(ts, ws.apiKey, sessionId, { toolCallId, error: 'late' });
    expect(r).toEqual({ status: 200, body: { accepted: false, sessionId, toolCallId, status: 'completed' } });
  });

  it('rejects a second message while a turn runs (409) and queues or interrupts on request', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Busy',
      config: { customTools: [{ name: 'wait_for_human' }] },
    });
    ts.fake.script({ toolCalls: [{ id: 'w1', name: 'wait_for_human', arguments: '{}' }] });
    const first = await openTurn(ts, ws.apiKey, sessionId, { message: 'one' });
    const pending = await first.until('tool_call.pending');

    const res = await sendMessage(ts, ws.apiKey, sessionId, { message: 'two' });
    expect(res.status).toBe(409);
    expect(await res.json()).toMatchObject({ code: 'TURN_IN_PROGRESS' });

    ts.fake.script({ text: 'first done' }, { text: 'second done' });
    const queued = await openTurn(ts, ws.apiKey, sessionId, { message: 'two', concurrency: 'queue' });
    await postToolResult(ts, ws.apiKey, sessionId, { toolCallId: pending.data.toolCallId, result: 'ok' });
    expect((await first.rest()).at(-1)?.data.type).toBe('run.completed');
    const qEvents = await queued.rest();
    expect(qEvents.at(-1)?.data.type).toBe('run.completed');
    expect(qEvents.find((e) => e.data.type === 'message.completed')?.data.content).toBe('second done');

    ts.fake.script(
      { toolCalls: [{ id: 'w2', name: 'wait_for_human', arguments: '{}' }] },
      { text: 'took over' },
    );
    const third = await openTurn(ts, ws.apiKey, sessionId, { message: 'three' });
    await third.until('tool_call.pending');
    const fourth = await openTurn(ts, ws.apiKey, sessionId, { message: 'four', concurrency: 'interrupt' });
    expect((await third.rest()).at(-1)?.data.type).toBe('run.cancelled');
    expect((await fourth.rest()).at(-1)?.data.type).toBe('run.completed');
  });

  it('an interrupt also cancels a turn still queued behind the running one', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Queued',
      config: { customTools: [{ name: 'wait_for_human' }] },
    });
    ts.fake.script({ toolCalls: [{ id: 'q1', name: 'wait_for_human', arguments: '{}' }] });
    const running = await openTurn(ts, ws.apiKey, sessionId, { message: 'one' });
    await running.until('tool_call.pending');
    const queued = await openTurn(ts, ws.apiKey, sessionId, { message: 'two', concurrency: 'queue' });

    ts.fake.script({ text: 'took over' });
    const third = await openTurn(ts, ws.apiKey, sessionId, { message: 'three', concurrency: 'interrupt' });
    expect((await running.rest()).at(-1)?.data.type).toBe('run.cancelled');
    const queuedEvents = await queued.rest();
    expect(queuedEvents.map((e) => e.data.type)).toEqual(['run.cancelled']);
    const thirdEvents = await third.rest();
    expect(thirdEvents.at(-1)?.data.type).toBe('run.completed');
    expect(thirdEvents.find((e) => e.data.type === 'message.completed')?.data.content).toBe('took over');

    const timeline = await ts.api(`/managed-agents/sessions/${sessionId}/events`, { key: ws.apiKey });
    const { events: tl } = (await timeline.json()) as { events: any[] };
    const runs = tl.filter((e) => e.type === 'turn_run').map((e) => e.status);
    expect(runs).toEqual(['cancelled', 'cancelled', 'completed']);
  });
});

describe('callback tools', () => {
  it('POSTs the call signed per Standard Webhooks and feeds the answer back to the model', async () => {
    callbackReply = () => ({ body: { result: { temperature: 21 } } });
    const { agentId, sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Callback',
      config: { customTools: [{ name: 'get_weather', callbackUrl: `${callbacks.url}/hook` }] },
    });
    const detail = (await (
      await ts.api(`/managed-agents/agents/${agentId}`, { key: ws.apiKey })
    ).json()) as any;
    const secret = detail.agent.callbackSecret as string;
    ts.fake.script(
      { toolCalls: [{ id: 'c1', name: 'get_weather', arguments: '{"city":"Oslo"}' }] },
      { text: 'It is 21 degrees.' },
    );
    const before = callbacks.requests.length;
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Weather?' });
    const events = await turn.rest();
    const types = events.map((e) => e.data.type);
    expect(types.slice(0, 3)).toEqual(['run.started', 'tool_call.started', 'tool_call.completed']);
    expect(types.at(-1)).toBe('run.completed');
    expect(events[2]?.data).toMatchObject({
      name: 'get_weather',
      status: 'completed',
      result: { temperature: 21 },
    });
    expect(events[1]?.data.toolCallId).toBe(events[2]?.data.toolCallId);

    const req = callbacks.requests[before];
    expect(req?.method).toBe('POST');
    expect(req?.headers['content-length']).toBe(String(Buffer.byteLength(req?.rawBody ?? '')));
    expect(req?.headers['transfer-encoding']).toBeUndefined();
    expect(req?.body).toMatchObject({
      type: 'tool_call',
      tool: 'get_weather',
      arguments: { city: 'Oslo' },
      agentId,
      sessionId,
    });
    // Standard Webhooks, checked by the reference implementation.
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]+={0,2}$/);
    const verified = new Webhook(secret).verify(req?.rawBody ?? '', req?.headers as Record<string, string>);
    expect(verified).toEqual(req?.body);
    expect(req?.headers['webhook-id']).toBe(req?.body.id);
    expect(req?.headers['x-aisuite-delivery']).toBe(req?.body.id);
    expect(req?.headers['x-aisuite-event']).toBe('tool_call');
    // The deprecated header, keyed with the secret's earlier base64url spelling.
    const legacySecret = `whsec_${Buffer.from(secret.slice(6), 'base64').toString('base64url')}`;
    const sig = String(req?.headers['x-aisuite-signature']);
    const [, t, v1] = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(sig) ?? [];
    expect(t).toBe(req?.headers['webhook-timestamp']);
    const expected = createHmac('sha256', legacySecret).update(`${t}.${req?.rawBody}`).digest('hex');
    expect(v1).toBe(expected);
    // Another agent's secret does not verify it.
    const otherKey = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
    expect(() =>
      new Webhook(otherKey).verify(req?.rawBody ?? '', req?.headers as Record<string, string>),
    ).toThrow('No matching signature found');
    expect(ts.fake.requests.at(-1)?.body.messages.at(-1).content).toBe('{"temperature":21}');
  });

  it('reports a failing callback as an error result, and the loop goes on', async () => {
    callbackReply = () => ({ status: 500, body: 'boom' });
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Failing',
      config: { customTools: [{ name: 'broken', callbackUrl: `${callbacks.url}/x` }] },
    });
    ts.fake.script({ toolCalls: [{ id: 'b1', name: 'broken', arguments: '{}' }] }, { text: 'Sorry.' });
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'go' })).rest();
    const done = events.find((e) => e.data.type === 'tool_call.completed');
    expect(done?.data).toMatchObject({ status: 'error', error: expect.stringContaining('500') });
    expect(events.at(-1)?.data.type).toBe('run.completed');
  });
});

describe('callback and MCP answers', () => {
  it('an answer above AGENT_TOOL_RESPONSE_MAX_BYTES is a tool error, not read whole or passed on', async () => {
    callbackReply = () => ({ body: { result: 'x'.repeat(2 * 1024 * 1024) } });
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Verbose',
      config: { customTools: [{ name: 'dump', callbackUrl: `${callbacks.url}/dump` }] },
    });
    ts.fake.script({ toolCalls: [{ id: 'd1', name: 'dump', arguments: '{}' }] }, { text: 'Too much.' });
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'dump' })).rest();
    const done = events.find((e) => e.data.type === 'tool_call.completed');
    expect(done?.data).toMatchObject({ status: 'error', error: 'Callback answer exceeds 1048576 bytes' });
    // The model got the error, not megabytes of text.
    const toolMessage = ts.fake.requests.at(-1)?.body.messages.find((m: any) => m.role === 'tool');
    expect(String(toolMessage?.content).length).toBeLessThan(1000);
    expect(events.at(-1)?.data.type).toBe('run.completed');
  });

  it('an MCP tool result above the bound fails that call; the stream is cut as it arrives', async () => {
    const mcp = await startTestMcpServer([
      { name: 'dump', description: 'Dumps a lot', handler: () => 'y'.repeat(3 * 1024 * 1024) },
      { name: 'small', description: 'Answers briefly', handler: () => 'ok' },
    ]);
    try {
      const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
        name: 'Verbose MCP',
        config: { capabilities: { mcp_servers: [{ name: 'big', url: mcp.url }] } },
      });
      ts.fake.script(
        { toolCalls: [{ id: 'm1', name: 'big__dump', arguments: '{}' }] },
        { toolCalls: [{ id: 'm2', name: 'big__small', arguments: '{}' }] },
        { text: 'Done.' },
      );
      const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'dump' })).rest();
      const done = events.filter((e) => e.data.type === 'tool_call.completed').map((e) => e.data);
      expect(done[0]).toMatchObject({
        name: 'big__dump',
        status: 'error',
        error: 'MCP server answer exceeds 1048576 bytes',
      });
      expect(String(done[0]?.error).length).toBeLessThan(2000);
      // The session still works for the next call.
      expect(done[1]).toMatchObject({ name: 'big__small', status: 'completed' });
      expect(events.at(-1)?.data.type).toBe('run.completed');
    } finally {
      await mcp.close();
    }
  });
});

describe('limits', () => {
  it('stops at compute.maxIterations with an error event and run.failed', async () => {
    callbackReply = () => ({ body: { result: 'again' } });
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Looper',
      config: {
        compute: { maxIterations: 2 },
        customTools: [{ name: 'spin', callbackUrl: `${callbacks.url}/spin` }],
      },
    });
    ts.fake.script(
      { toolCalls: [{ id: 's1', name: 'spin', arguments: '{}' }] },
      { toolCalls: [{ id: 's2', name: 'spin', arguments: '{}' }] },
      { text: 'never reached' },
    );
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'loop' })).rest();
    const types = events.map((e) => e.data.type);
    expect(types.filter((t) => t === 'tool_call.started')).toHaveLength(2);
    expect(events.at(-2)?.data).toMatchObject({ type: 'error', code: 'MAX_ITERATIONS' });
    expect(events.at(-1)?.data).toMatchObject({ type: 'run.failed', error: 'maxIterations reached (2)' });
    ts.fake.reset();
  });

  it('stops at compute.maxWallClockMs with an error event and run.failed', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Slow',
      config: { compute: { maxWallClockMs: 1000 } },
    });
    ts.fake.script({ hang: true });
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'wait' })).rest();
    expect(events.at(-2)?.data).toMatchObject({ type: 'error', code: 'MAX_WALL_CLOCK' });
    expect(events.at(-1)?.data.type).toBe('run.failed');
  });
});
