import { type HttpFixture, startHttpFixture, startTestMcpServer } from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { createAgentWithSession, openTurn, postToolResult, type TurnReader } from './test-helpers.js';

/**
 * Tool approval (issue 42, docs/agents.md "Tool approval"): a call of a tool named in
 * `toolApproval` waits for a person's decision; nothing runs before it; approved arguments are
 * checked against the tool's schema; denied, expired or refused decisions never run the tool.
 */

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let other: TestWorkspace;
let callbacks: HttpFixture;

const REFUND_TOOL = {
  name: 'issue_refund',
  description: 'Refunds an order',
  inputSchema: {
    type: 'object',
    properties: { orderId: { type: 'string' }, amount: { type: 'number', maximum: 500 } },
    required: ['orderId', 'amount'],
    additionalProperties: false,
  },
};

beforeAll(async () => {
  callbacks = await startHttpFixture((req) => ({ body: { result: { refunded: req.body?.arguments } } }));
  ts = await startTestServerWithFakeModel({
    env: {
      OUTBOUND_ALLOWLIST: '127.0.0.1',
      RUN_POLL_INTERVAL_MS: '100',
      RATE_LIMIT_SESSION_CREATE: '1000',
      RATE_LIMIT_AGENT_MESSAGE: '1000',
    },
  });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  other = await createTestWorkspace(ts, { creditsUsd: '10' });
});
afterAll(async () => {
  await ts?.close();
  await callbacks?.close();
});

async function decide(sessionId: string, body: Record<string, unknown>, key = ws.apiKey) {
  const res = await ts.api(`/managed-agents/sessions/${sessionId}/tool-approvals`, {
    method: 'POST',
    key,
    json: body,
  });
  return { status: res.status, body: (await res.json()) as any };
}

async function timelineApprovals(sessionId: string) {
  const res = await ts.api(`/managed-agents/sessions/${sessionId}/events`, { key: ws.apiKey });
  const { events } = (await res.json()) as { events: any[] };
  return events.filter((e) => e.type === 'turn_run').flatMap((e) => e.approvals);
}

const refundCalls = () => callbacks.requests.filter((r) => r.body?.tool === 'issue_refund');

async function refundAgent(extra: Record<string, unknown> = {}) {
  return createAgentWithSession(ts, ws.apiKey, {
    name: 'Refunds',
    config: {
      customTools: [{ ...REFUND_TOOL, callbackUrl: `${callbacks.url}/refund` }],
      toolApproval: ['issue_refund'],
      ...extra,
    },
  });
}

async function waitForApproval(turn: TurnReader) {
  const ev = await turn.until('tool_call.approval_required');
  return ev.data as { runId: string; toolCallId: string; name: string; arguments: any; deadline: string };
}

describe('config', () => {
  it('accepts platform, custom, pack, MCP and "*" names; an unknown name is a 400 naming it', async () => {
    const ok = await ts.api('/managed-agents/agents', {
      method: 'POST',
      key: ws.apiKey,
      json: {
        name: 'Names',
        config: {
          customTools: [{ name: 'ask_human' }],
          capabilities: { mcp_servers: [{ name: 'calc', url: 'http://127.0.0.1:9/mcp' }] },
          toolApproval: [
            'web_fetch',
            'ask_human',
            'commerce.request_refund',
            'crm_add_note',
            'calc__add',
            '*',
          ],
        },
      },
    });
    expect(ok.status).toBe(201);
    const agentId = ((await ok.json()) as any).agent.id as string;

    const bad = await ts.api('/managed-agents/agents', {
      method: 'POST',
      key: ws.apiKey,
      json: { name: 'Bad', config: { toolApproval: ['web_fetch', 'delete_everything'] } },
    });
    expect(bad.status).toBe(400);
    const badBody = (await bad.json()) as any;
    expect(badBody.error).toContain('"delete_everything"');
    expect(badBody).toMatchObject({ code: 'UNKNOWN_TOOL', details: { field: 'config.toolApproval.1' } });
    // An MCP-looking name of a server the config does not list.
    const mcp = await ts.api('/managed-agents/agents', {
      method: 'POST',
      key: ws.apiKey,
      json: { name: 'Bad MCP', config: { toolApproval: ['nowhere__add'] } },
    });
    expect(mcp.status).toBe(400);

    // Deep-merged on update: the merged config is checked (the custom tool it names is kept).
    const patch = (config: unknown) =>
      ts.api(`/managed-agents/agents/${agentId}`, { method: 'PATCH', key: ws.apiKey, json: { config } });
    let res = await patch({ toolApproval: ['ask_human', 'nope'] });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error).toContain('"nope"');
    // Removing the custom tool the list names is refused too.
    res = await patch({ customTools: [] });
    expect(res.status).toBe(400);
    res = await patch({ toolApproval: ['ask_human'] });
    expect(res.status).toBe(200);
    const got = (await res.json()) as any;
    expect(got.agent.config.toolApproval).toEqual(['ask_human']);
    expect(got.agent.config.customTools).toEqual([{ name: 'ask_human' }]);
    const defaults = (await (
      await ts.api('/managed-agents/config-defaults', { key: ws.apiKey })
    ).json()) as any;
    expect(defaults.config.toolApproval).toEqual([]);
  });
});

describe('a callback tool that needs approval', () => {
  it('waits; refuses hostile decisions with nothing run; runs with the approved arguments', async () => {
    const { agentId, sessionId } = await refundAgent();
    ts.fake.script(
      { toolCalls: [{ id: 'r1', name: 'issue_refund', arguments: '{"orderId":"A-1","amount":900}' }] },
      { text: 'Refund issued.' },
    );
    const before = refundCalls().length;
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Refund A-1' });
    const req = await waitForApproval(turn);
    expect(req).toMatchObject({ name: 'issue_refund', arguments: { orderId: 'A-1', amount: 900 } });
    // AGENT_APPROVAL_DEADLINE_MS: 10 minutes by default.
    const left = Date.parse(req.deadline) - Date.now();
    expect(left).toBeGreaterThan(8 * 60_000);
    expect(left).toBeLessThanOrEqual(10 * 60_000 + 5_000);
    const { toolCallId } = req;

    // The timeline and the agent's page show it waiting.
    expect(await timelineApprovals(sessionId)).toEqual([
      expect.objectContaining({
        toolCallId,
        status: 'pending',
        name: 'issue_refund',
        arguments: req.arguments,
      }),
    ]);
    const listed = await ts.api(`/managed-agents/agents/${agentId}/tool-approvals`, { key: ws.apiKey });
    expect(((await listed.json()) as any).approvals).toEqual([
      expect.objectContaining({ toolCallId, sessionId, runId: req.runId, status: 'pending' }),
    ]);
    const foreignList = await ts.api(`/managed-agents/agents/${agentId}/tool-approvals`, {
      key: other.apiKey,
    });
    expect(foreignList.status).toBe(404);

    // Hostile callers: another workspace, another session, an unknown id, a bad body.
    const { sessionId: foreignSession } = await createAgentWithSession(ts, other.apiKey, { name: 'Foreign' });
    expect(await decide(foreignSession, { toolCallId, approved: true }, other.apiKey)).toEqual({
      status: 404,
      body: { error: 'Unknown toolCallId' },
    });
    expect((await decide(sessionId, { toolCallId, approved: true }, other.apiKey)).status).toBe(404);
    const { sessionId: sibling } = await createAgentWithSession(ts, ws.apiKey, { name: 'Sibling' });
    expect(await decide(sibling, { toolCallId, approved: true })).toEqual({
      status: 403,
      body: { error: 'toolCallId does not belong to session' },
    });
    expect(await decide(sessionId, { toolCallId: 'call_nope', approved: true })).toEqual({
      status: 404,
      body: { error: 'Unknown toolCallId' },
    });
    expect((await decide(sessionId, { toolCallId })).status).toBe(400);
    // An approval is not an integrator call: no result through tool-results.
    expect(await postToolResult(ts, ws.apiKey, sessionId, { toolCallId, result: 'x' })).toEqual({
      status: 404,
      body: { error: 'Unknown toolCallId' },
    });
    // Arguments that break the tool's schema: 400, still waiting.
    for (const bad of [
      { orderId: 'A-1', amount: 900 },
      { orderId: 'A-1' },
      { orderId: 'A-1', amount: 5, x: 1 },
    ]) {
      const r = await decide(sessionId, { toolCallId, approved: true, arguments: bad });
      expect(r.status).toBe(400);
      expect(r.body).toMatchObject({ code: 'INVALID_ARGUMENTS' });
      expect(r.body.error).toMatch(/^arguments do not match the tool's inputSchema: /);
    }
    expect(refundCalls().length).toBe(before);
    expect((await timelineApprovals(sessionId))[0]?.status).toBe('pending');

    // The person lowers the amount and approves.
    const ok = await decide(sessionId, {
      toolCallId,
      approved: true,
      arguments: { orderId: 'A-1', amount: 450 },
    });
    expect(ok).toEqual({ status: 200, body: { accepted: true, sessionId, toolCallId, status: 'approved' } });
    const events = await turn.rest();
    expect(events.map((e) => e.data.type).filter((t) => t !== 'message.delta')).toEqual([
      'run.started',
      'tool_call.approval_required',
      'tool_call.approval_decided',
      'tool_call.started',
      'tool_call.completed',
      'message.completed',
      'run.completed',
    ]);
    expect(events.find((e) => e.data.type === 'tool_call.approval_decided')?.data).toEqual({
      type: 'tool_call.approval_decided',
      runId: req.runId,
      toolCallId,
      name: 'issue_refund',
      status: 'approved',
      arguments: { orderId: 'A-1', amount: 450 },
    });
    expect(events.find((e) => e.data.type === 'tool_call.started')?.data).toMatchObject({
      toolCallId,
      arguments: { orderId: 'A-1', amount: 450 },
    });
    expect(
      refundCalls()
        .slice(before)
        .map((r) => r.body.arguments),
    ).toEqual([{ orderId: 'A-1', amount: 450 }]);
    const told = ts.fake.requests.at(-1)?.body.messages.at(-1);
    expect(told).toMatchObject({ role: 'tool', tool_call_id: 'r1' });
    expect(JSON.parse(told.content)).toEqual({ refunded: { orderId: 'A-1', amount: 450 } });
    expect(await timelineApprovals(sessionId)).toEqual([
      expect.objectContaining({
        toolCallId,
        status: 'approved',
        approvedArguments: { orderId: 'A-1', amount: 450 },
      }),
    ]);

    // Twice: 409, nothing runs again.
    const again = await decide(sessionId, { toolCallId, approved: false });
    expect(again).toMatchObject({ status: 409, body: { code: 'APPROVAL_DECIDED' } });
    expect(refundCalls().length).toBe(before + 1);
    const empty = await ts.api(`/managed-agents/agents/${agentId}/tool-approvals`, { key: ws.apiKey });
    expect(((await empty.json()) as any).approvals).toEqual([]);
  });

  it('a denial tells the model a person declined, with the reason; the turn goes on', async () => {
    const { sessionId } = await refundAgent();
    ts.fake.script(
      { toolCalls: [{ id: 'd1', name: 'issue_refund', arguments: '{"orderId":"B-2","amount":20}' }] },
      { text: 'I will not refund it.' },
    );
    const before = refundCalls().length;
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Refund B-2' });
    const { toolCallId } = await waitForApproval(turn);
    const r = await decide(sessionId, { toolCallId, approved: false, reason: 'Outside the refund window' });
    expect(r).toEqual({ status: 200, body: { accepted: true, sessionId, toolCallId, status: 'denied' } });
    const events = await turn.rest();
    const done = events.find((e) => e.data.type === 'tool_call.completed')?.data;
    expect(done).toMatchObject({
      toolCallId,
      status: 'error',
      error: 'A person declined this tool call: Outside the refund window',
    });
    expect(events.some((e) => e.data.type === 'tool_call.started')).toBe(false);
    expect(events.at(-1)?.data.type).toBe('run.completed');
    expect(ts.fake.requests.at(-1)?.body.messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'd1',
      content: JSON.stringify({ error: 'A person declined this tool call: Outside the refund window' }),
    });
    expect(refundCalls().length).toBe(before);
    expect((await decide(sessionId, { toolCallId, approved: true })).status).toBe(409);
    expect(refundCalls().length).toBe(before);
  });

  it('after the deadline: refused (409), nothing runs, the model is told nobody approved', async () => {
    const { sessionId } = await refundAgent();
    ts.fake.script(
      { toolCalls: [{ id: 'e1', name: 'issue_refund', arguments: '{"orderId":"C-3","amount":5}' }] },
      { text: 'Nobody approved.' },
      { toolCalls: [{ id: 'e2', name: 'issue_refund', arguments: '{"orderId":"C-4","amount":5}' }] },
      { text: 'Swept.' },
    );
    const before = refundCalls().length;
    let turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Refund C-3' });
    let { toolCallId } = await waitForApproval(turn);
    // Move the deadline to the past instead of waiting (the sweep would expire it too).
    const expire = (id: string) =>
      ts.server.deps
        .em()
        .execute(`update tool_calls set deadline_at = now() - interval '1 second' where id = ?`, [id]);
    // Whether the sweep or this decision finds it first, the answer is the same.
    await expire(toolCallId);
    const late = await decide(sessionId, { toolCallId, approved: true });
    expect(late).toMatchObject({ status: 409, body: { code: 'APPROVAL_EXPIRED' } });
    let events = await turn.rest();
    expect(events.find((e) => e.data.type === 'tool_call.approval_decided')?.data).toMatchObject({
      status: 'expired',
    });
    expect(events.find((e) => e.data.type === 'tool_call.completed')?.data).toMatchObject({
      status: 'error',
      error: 'A person declined this tool call: no decision came before the approval deadline',
    });
    expect(events.at(-1)?.data.type).toBe('run.completed');

    // Left alone: the sweep expires it and the turn goes on.
    turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Refund C-4' });
    ({ toolCallId } = await waitForApproval(turn));
    await expire(toolCallId);
    events = await turn.rest();
    expect(events.at(-1)?.data.type).toBe('run.completed');
    expect((await decide(sessionId, { toolCallId, approved: true })).status).toBe(409);
    expect(refundCalls().length).toBe(before);
    expect((await timelineApprovals(sessionId)).map((a) => a.status)).toEqual(['expired', 'expired']);
  });

  it('the wait is not counted against maxWallClockMs', async () => {
    // Room for the turn's own work on a loaded machine; the wait alone is longer than the budget.
    const { sessionId } = await refundAgent({ compute: { maxWallClockMs: 4000 } });
    ts.fake.script(
      { toolCalls: [{ id: 'w1', name: 'issue_refund', arguments: '{"orderId":"D-1","amount":1}' }] },
      { text: 'Done after the wait.' },
    );
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Refund D-1' });
    const { toolCallId } = await waitForApproval(turn);
    await new Promise((r) => setTimeout(r, 5000));
    expect((await decide(sessionId, { toolCallId, approved: true })).status).toBe(200);
    const events = await turn.rest();
    expect(events.at(-1)?.data).toEqual({ type: 'run.completed', runId: expect.any(String) });
  });
});

describe('other tool owners', () => {
  it('an approved integrator-owned tool ("*") then waits on the integrator (tool_call.pending)', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Hitl',
      config: {
        customTools: [
          { name: 'lookup_order', inputSchema: { type: 'object', properties: { id: { type: 'string' } } } },
        ],
        toolApproval: ['*'],
      },
    });
    ts.fake.script(
      { toolCalls: [{ id: 'i1', name: 'lookup_order', arguments: '{"id":"Z-9"}' }] },
      { text: 'It shipped.' },
    );
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Where is Z-9?' });
    const req = await waitForApproval(turn);
    expect(await decide(sessionId, { toolCallId: req.toolCallId, approved: true })).toMatchObject({
      status: 200,
    });
    const pending = await turn.until('tool_call.pending');
    expect(pending.data).toMatchObject({ name: 'lookup_order', arguments: { id: 'Z-9' } });
    expect(pending.data.toolCallId).not.toBe(req.toolCallId);
    const r = await postToolResult(ts, ws.apiKey, sessionId, {
      toolCallId: pending.data.toolCallId,
      result: 'shipped',
    });
    expect(r.body).toMatchObject({ accepted: true, status: 'completed' });
    const events = await turn.rest();
    expect(events.at(-1)?.data.type).toBe('run.completed');
    expect(ts.fake.requests.at(-1)?.body.messages.at(-1)).toMatchObject({
      tool_call_id: 'i1',
      content: '"shipped"',
    });
  });

  it('an MCP tool runs on the MCP server only once approved, with the approved arguments', async () => {
    const mcp = await startTestMcpServer();
    try {
      const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
        name: 'Calc',
        config: {
          capabilities: { mcp_servers: [{ name: 'calc', url: mcp.url }] },
          toolApproval: ['calc__add'],
        },
      });
      ts.fake.script(
        { toolCalls: [{ id: 'a1', name: 'calc__add', arguments: '{"a":1,"b":2}' }] },
        { text: 'Sum given.' },
      );
      const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'add' });
      const { toolCallId } = await waitForApproval(turn);
      expect(mcp.calls).toEqual([]);
      const bad = await decide(sessionId, { toolCallId, approved: true, arguments: { a: 'one', b: 2 } });
      expect(bad.status).toBe(400);
      expect(bad.body.error).toContain('/a');
      expect(
        await decide(sessionId, { toolCallId, approved: true, arguments: { a: 40, b: 2 } }),
      ).toMatchObject({
        status: 200,
      });
      const events = await turn.rest();
      expect(events.find((e) => e.data.type === 'tool_call.completed')?.data).toMatchObject({
        status: 'completed',
        result: '42',
      });
      expect(mcp.calls).toEqual([{ name: 'add', arguments: { a: 40, b: 2 } }]);
    } finally {
      await mcp.close();
    }
  });
});

describe('autonomous runs', () => {
  it('use the same flow; the run events and the webhook say when the run waits for a decision', async () => {
    const a = await ts.api('/managed-agents/agents', {
      method: 'POST',
      key: ws.apiKey,
      json: {
        name: 'Auto',
        config: {
          runtimeMode: 'autonomous',
          capabilities: { deliverables: { enabled: true } },
          customTools: [{ ...REFUND_TOOL, callbackUrl: `${callbacks.url}/refund` }],
          toolApproval: ['issue_refund'],
        },
      },
    });
    const agentId = ((await a.json()) as any).agent.id as string;
    ts.fake.script(
      { toolCalls: [{ id: 'x1', name: 'issue_refund', arguments: '{"orderId":"R-1","amount":3}' }] },
      { text: 'Refunded R-1.' },
    );
    const before = refundCalls().length;
    const created = await ts.api(`/managed-agents/agents/${agentId}/runs`, {
      method: 'POST',
      key: ws.apiKey,
      json: { task: 'Refund R-1', webhookUrl: `${callbacks.url}/hooks` },
    });
    expect(created.status).toBe(201);
    const { runId, sessionId } = (await created.json()) as { runId: string; sessionId: string };
    const detail = async () =>
      (await (
        await ts.api(`/managed-agents/agents/${agentId}/runs/${runId}`, { key: ws.apiKey })
      ).json()) as any;
    await expect
      .poll(async () => (await detail()).events.map((e: any) => e.event_type), { timeout: 30_000 })
      .toContain('tool_call.approval_required');
    const waitEv = (await detail()).events.find((e: any) => e.event_type === 'tool_call.approval_required');
    expect(refundCalls().length).toBe(before);
    // The webhook says it waits (signed like the completion webhook; the call id is the delivery id).
    const hooks = () => callbacks.requests.filter((r) => r.path === '/hooks');
    await expect.poll(() => hooks().length, { timeout: 30_000 }).toBe(1);
    const notice = hooks()[0];
    expect(notice?.headers['webhook-id']).toBe(waitEv.payload.toolCallId);
    expect(notice?.headers['x-aisuite-event']).toBe('run.approval_required');
    expect(notice?.body).toMatchObject({
      type: 'run.approval_required',
      runId,
      agentId,
      sessionId,
      toolCallId: waitEv.payload.toolCallId,
      name: 'issue_refund',
      arguments: { orderId: 'R-1', amount: 3 },
      deadline: waitEv.payload.deadline,
    });
    expect(await decide(sessionId, { toolCallId: waitEv.payload.toolCallId, approved: true })).toMatchObject({
      status: 200,
      body: { status: 'approved' },
    });
    await expect.poll(async () => (await detail()).run.status, { timeout: 30_000 }).toBe('completed');
    expect(
      refundCalls()
        .slice(before)
        .map((r) => r.body.arguments),
    ).toEqual([{ orderId: 'R-1', amount: 3 }]);
    await expect
      .poll(() => hooks().map((r) => r.body.type), { timeout: 30_000 })
      .toEqual(['run.approval_required', 'run.completed']);
  });
});
