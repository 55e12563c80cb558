import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AiSuite, MissingToolHandlerError } from '../src/index.js';

let ts: TestServer & { fake: FakeOpenAI };
let client: AiSuite;

beforeAll(async () => {
  // The default tool deadline (10 minutes): a test that waited for it would time out.
  ts = await startTestServerWithFakeModel({ env: { RUN_POLL_INTERVAL_MS: '50', RUN_POLL_HINT_MS: '50' } });
  const ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, maxRetries: 0 });
});
afterAll(() => ts?.close());

describe('integrator tools without a handler', () => {
  it('finalText() fails fast with MissingToolHandlerError naming the tool; the call can still be answered', async () => {
    const { agent } = await client.agents.create({
      name: 'Needs a tool',
      config: { customTools: [{ name: 'lookup_order' }, { name: 'known' }] },
    });
    const { session } = await client.sessions.create(agent.id);
    ts.fake.script(
      { toolCalls: [{ id: 'x1', name: 'lookup_order', arguments: '{"orderId":"A-1"}' }] },
      { text: 'Found it.' },
    );
    const stream = client.sessions.send(session.id, 'Where is A-1?', { tools: { known: () => 1 } });
    const err = (await stream.finalText().catch((e: unknown) => e)) as MissingToolHandlerError;
    expect(err).toBeInstanceOf(MissingToolHandlerError);
    expect(err.toolName).toBe('lookup_order');
    expect(err.arguments).toEqual({ orderId: 'A-1' });
    expect(err.sessionId).toBe(session.id);
    expect(err.message).toContain('"lookup_order"');
    // Still pending on the server: answering it finishes the turn.
    const accepted = await client.sessions.submitToolResult(session.id, {
      toolCallId: err.toolCallId,
      result: { status: 'shipped' },
    });
    expect(accepted).toMatchObject({ accepted: true, status: 'completed' });
    const resumed = client.sessions.stream(session.id, err.runId);
    expect(await resumed.finalText()).toBe('Found it.');
  });

  it('iterating hands the pending call to the caller instead (no error)', async () => {
    const { agent } = await client.agents.create({
      name: 'Manual',
      config: { customTools: [{ name: 'manual' }] },
    });
    const { session } = await client.sessions.create(agent.id);
    ts.fake.script({ toolCalls: [{ id: 'm1', name: 'manual', arguments: '{}' }] }, { text: 'Thanks.' });
    const types: string[] = [];
    for await (const e of client.sessions.send(session.id, 'go')) {
      types.push(e.type);
      if (e.type === 'tool_call.pending') {
        await client.sessions.submitToolResult(session.id, { toolCallId: e.toolCallId, result: 'done' });
      }
    }
    expect(types).toContain('tool_call.pending');
    expect(types.at(-1)).toBe('run.completed');
  });
});

describe('runs.createAndPoll with tools', () => {
  it('runs integrator tool handlers of an autonomous run, and fails fast on one without a handler', async () => {
    const { agent } = await client.agents.create({
      name: 'Autonomous with tools',
      config: {
        runtimeMode: 'autonomous',
        capabilities: { deliverables: { enabled: true } },
        customTools: [{ name: 'fetch_figures' }, { name: 'unhandled' }],
      },
    });
    ts.fake.script(
      { toolCalls: [{ id: 'f1', name: 'fetch_figures', arguments: '{"quarter":"Q3"}' }] },
      { text: 'Revenue was 42.' },
    );
    const seen: unknown[] = [];
    const done = await client.runs.createAndPoll(
      agent.id,
      { task: 'Report Q3' },
      {
        intervalMs: 50,
        tools: {
          fetch_figures: (args) => {
            seen.push(args);
            return { revenue: 42 };
          },
        },
      },
    );
    expect(done.run.status).toBe('completed');
    expect(seen).toEqual([{ quarter: 'Q3' }]);
    expect(ts.fake.requests.at(-1)?.body.messages.at(-1)).toMatchObject({
      role: 'tool',
      content: '{"revenue":42}',
    });

    ts.fake.script({ toolCalls: [{ id: 'u1', name: 'unhandled', arguments: '{}' }] });
    const err = await client.runs
      .createAndPoll(agent.id, { task: 'Use the other tool' }, { intervalMs: 50, tools: {} })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(MissingToolHandlerError);
    expect((err as MissingToolHandlerError).toolName).toBe('unhandled');
    await client.sessions.cancel(
      (err as MissingToolHandlerError).sessionId,
      (err as MissingToolHandlerError).runId,
    );
  });
});
