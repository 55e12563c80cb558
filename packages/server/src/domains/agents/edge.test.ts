import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { createAgentWithSession, openTurn, postToolResult } from './test-helpers.js';

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    env: {
      RUN_POLL_INTERVAL_MS: '100',
      METERING_CREDIT_CHECK_TOKENS: '1',
      METERING_DEFAULT_OUTPUT_TOKENS: '2',
    },
  });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
});
afterAll(() => ts?.close());

describe('turn failures and pack tools', () => {
  it('reports 402 mid-stream as an error event, then run.failed', async () => {
    const poor = await createTestWorkspace(ts, { creditsUsd: '0.00003' }); // 30 micro-dollars
    const { sessionId } = await createAgentWithSession(ts, poor.apiKey, { name: 'Poor' });
    ts.fake.script({ text: 'z'.repeat(400), chunkSize: 4, usage: false });
    const events = await (await openTurn(ts, poor.apiKey, sessionId, { message: 'talk a lot' })).rest();
    expect(events.some((e) => e.data.type === 'message.delta')).toBe(true);
    expect(events.at(-2)?.data).toEqual({
      type: 'error',
      code: 'INSUFFICIENT_CREDITS',
      message: 'Insufficient credits. Please purchase additional credits to continue.',
    });
    expect(events.at(-1)?.data.type).toBe('run.failed');
    expect(events.filter((e) => e.data.type === 'message.delta').length).toBeLessThan(100);
  });

  it('reports an upstream model error as an error event, then run.failed', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Upstream' });
    ts.fake.script({ error: { status: 400, message: 'context too long' } });
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'x' })).rest();
    expect(events.map((e) => e.data.type)).toEqual(['run.started', 'error', 'run.failed']);
    expect(events[1]?.data.message).toMatch(/AI model error|context too long/);
    const timeline = await ts.api(`/managed-agents/sessions/${sessionId}/events`, { key: ws.apiKey });
    const run = ((await timeline.json()) as any).events.find((e: any) => e.type === 'turn_run');
    expect(run.status).toBe('failed');
    expect(run.error_message).toEqual(expect.any(String));
  });

  it('offers hitl_deferred tools of an enabled integration binding as integrator-owned', async () => {
    const { agentId, sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Helpdesk' });
    const res = await ts.api(`/managed-agents/agents/${agentId}`, {
      method: 'PATCH',
      key: ws.apiKey,
      json: { integrationBindings: [{ packId: 'helpdesk', workspaceIntegrationId: 'wi_1' }] },
    });
    expect(res.status).toBe(200);
    ts.fake.script(
      { toolCalls: [{ id: 'e1', name: 'helpdesk_escalate_to_human', arguments: '{"reason":"angry"}' }] },
      { text: 'A human will contact you.' },
    );
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'I want a human' });
    const pending = await turn.until('tool_call.pending');
    expect(pending.data).toMatchObject({
      name: 'helpdesk_escalate_to_human',
      arguments: { reason: 'angry' },
    });
    const offered = ts.fake.requests.at(-1)?.body.tools.map((t: any) => t.function.name);
    expect(offered).toContain('helpdesk_escalate_to_human');
    await postToolResult(ts, ws.apiKey, sessionId, {
      toolCallId: pending.data.toolCallId,
      error: 'no agents online',
    });
    const events = await turn.rest();
    expect(events.find((e) => e.data.type === 'tool_call.completed')?.data).toMatchObject({
      status: 'error',
      error: 'no agents online',
    });
    expect(events.at(-1)?.data.type).toBe('run.completed');
    expect(ts.fake.requests.at(-1)?.body.messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'e1',
      content: '{"error":"no agents online"}',
    });
  });
});

describe('the turn route before express (http/fast-path.ts)', () => {
  const post = (sessionId: string, body: string, headers: Record<string, string> = {}, key = ws.apiKey) =>
    fetch(`${ts.url}/api/v1/managed-agents/sessions/${sessionId}/messages`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
      body,
    });

  it('answers bad bodies, credentials and ids as the general path does, and starts nothing', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Edges' });
    const expectError = async (res: Response, status: number, error: string) => {
      expect(res.status).toBe(status);
      expect(await res.json()).toMatchObject({ error });
    };
    await expectError(await post(sessionId, '{"message":'), 400, 'Invalid request body');
    await expectError(
      await post(sessionId, `${'['.repeat(100)}${']'.repeat(100)}`),
      400,
      'Invalid request body',
    );
    await expectError(
      await post(sessionId, JSON.stringify({ message: 'x'.repeat(1_100_000) })),
      413,
      'Request body too large',
    );
    // Not JSON, not a key, not a session id, an unknown field value: handed to express.
    await expectError(
      await post(sessionId, 'message=hi', { 'content-type': 'text/plain' }),
      400,
      'Invalid request body',
    );
    await expectError(await post(sessionId, '{"message":"hi"}', {}, 'svc_ai_nope'), 401, 'Invalid API key');
    await expectError(await post('..%2F..%2Fagents', '{"message":"hi"}'), 404, 'Session not found');
    await expectError(await post(sessionId, '{"message":"  "}'), 400, 'message is required');
    const badPolicy = await post(sessionId, '{"message":"hi","concurrency":"never"}');
    expect(badPolicy.status).toBe(400);
    expect((await badPolicy.json()).error).toMatch(/^concurrency: /);
    const runs = await ts.server.deps
      .em()
      .execute<{ n: string }[]>('select count(*) as n from runs where session_id = ?', [sessionId]);
    expect(Number(runs[0]?.n)).toBe(0);
  });
});
