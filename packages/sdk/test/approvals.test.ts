import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { type HttpFixture, startHttpFixture } from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AiSuite, type ApprovalRequest, ConflictError } from '../src/index.js';

let ts: TestServer & { fake: FakeOpenAI };
let client: AiSuite;
let callbacks: HttpFixture;

beforeAll(async () => {
  callbacks = await startHttpFixture((req) => ({ body: { result: { sent: req.body?.arguments } } }));
  ts = await startTestServerWithFakeModel({
    env: { OUTBOUND_ALLOWLIST: '127.0.0.1', RUN_POLL_INTERVAL_MS: '50', RUN_POLL_HINT_MS: '50' },
  });
  const ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, maxRetries: 0 });
});
afterAll(async () => {
  await ts?.close();
  await callbacks?.close();
});

async function mailer() {
  const { agent } = await client.agents.create({
    name: 'Mailer',
    config: {
      customTools: [
        {
          name: 'send_mail',
          inputSchema: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] },
          callbackUrl: `${callbacks.url}/mail`,
        },
      ],
      toolApproval: ['send_mail'],
    },
  });
  const { session } = await client.sessions.create(agent.id);
  return { agentId: agent.id, sessionId: session.id };
}

describe('tool approval in the SDK', () => {
  it('the approve callback of the tool loop runs the call with edited arguments', async () => {
    const { sessionId } = await mailer();
    ts.fake.script(
      { toolCalls: [{ id: 's1', name: 'send_mail', arguments: '{"to":"all@corp"}' }] },
      { text: 'Sent.' },
    );
    const seen: ApprovalRequest[] = [];
    const stream = client.sessions.send(sessionId, 'Mail everyone', {
      approve: (call) => {
        seen.push(call);
        return { arguments: { to: 'team@corp' } };
      },
    });
    const events = await stream.done();
    expect(seen).toEqual([expect.objectContaining({ name: 'send_mail', arguments: { to: 'all@corp' } })]);
    const decided = events.find((e) => e.type === 'tool_call.approval_decided');
    expect(decided).toMatchObject({ status: 'approved', arguments: { to: 'team@corp' } });
    expect(events.at(-1)?.type).toBe('run.completed');
    expect(callbacks.requests.at(-1)?.body.arguments).toEqual({ to: 'team@corp' });
  });

  it('false declines; approveToolCall / denyToolCall decide by hand; a second decision is a ConflictError', async () => {
    const { agentId, sessionId } = await mailer();
    const before = callbacks.requests.length;
    ts.fake.script(
      { toolCalls: [{ id: 's2', name: 'send_mail', arguments: '{"to":"x@corp"}' }] },
      { text: 'Not sent.' },
    );
    expect(await client.sessions.send(sessionId, 'Mail x', { approve: () => false }).finalText()).toBe(
      'Not sent.',
    );
    expect(ts.fake.requests.at(-1)?.body.messages.at(-1).content).toBe(
      JSON.stringify({ error: 'A person declined this tool call' }),
    );

    ts.fake.script(
      { toolCalls: [{ id: 's3', name: 'send_mail', arguments: '{"to":"y@corp"}' }] },
      { text: 'Ok.' },
    );
    const stream = client.sessions.send(sessionId, 'Mail y');
    let toolCallId = '';
    for await (const e of stream) {
      if (e.type === 'tool_call.approval_required') {
        toolCallId = e.toolCallId;
        const { approvals } = await client.agents.pendingApprovals(agentId);
        expect(approvals.map((a) => a.toolCallId)).toEqual([toolCallId]);
        expect(await client.sessions.denyToolCall(sessionId, toolCallId, { reason: 'not now' })).toEqual({
          accepted: true,
          sessionId,
          toolCallId,
          status: 'denied',
        });
      }
    }
    await expect(client.sessions.approveToolCall(sessionId, toolCallId)).rejects.toBeInstanceOf(
      ConflictError,
    );
    expect(callbacks.requests.length).toBe(before);
  });

  it('runs.createAndPoll decides with approve', async () => {
    const { agent } = await client.agents.create({
      name: 'Auto mailer',
      config: {
        runtimeMode: 'autonomous',
        capabilities: { deliverables: { enabled: true } },
        customTools: [{ name: 'send_mail', callbackUrl: `${callbacks.url}/mail` }],
        toolApproval: ['*'],
      },
    });
    ts.fake.script(
      { toolCalls: [{ id: 'p1', name: 'send_mail', arguments: '{"to":"z@corp"}' }] },
      { text: 'Done.' },
    );
    const detail = await client.runs.createAndPoll(
      agent.id,
      { task: 'Mail z' },
      { approve: () => true, intervalMs: 50 },
    );
    expect(detail.run.status).toBe('completed');
    expect(detail.events.map((e) => e.event_type)).toContain('tool_call.approval_decided');
    expect(callbacks.requests.at(-1)?.body.arguments).toEqual({ to: 'z@corp' });
  });
});
