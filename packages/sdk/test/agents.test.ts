import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentEvent, AgentRunError, AiSuite, ConflictError, NotFoundError } from '../src/index.js';

let ts: TestServer & { fake: FakeOpenAI };
let client: AiSuite;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RUN_POLL_INTERVAL_MS: '100' } });
  const ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, maxRetries: 0 });
});
afterAll(() => ts?.close());

describe('agents and sessions through the SDK', () => {
  it('creates, reads, updates, lists and deletes agents and sessions', async () => {
    const { agent } = await client.agents.create({
      name: 'SDK agent',
      config: { compute: { maxIterations: 4 } },
    });
    expect(agent.appType).toBe('agent');
    const detail = await client.agents.retrieve(agent.id);
    expect(detail.agent.config).toMatchObject({ platformVersion: 2, compute: { maxIterations: 4 } });
    const updated = await client.agents.update(agent.id, {
      description: 'changed',
      tools: [{ toolId: 'web_fetch', enabled: true }],
    });
    expect(updated.agent).toMatchObject({ name: 'SDK agent', description: 'changed' });
    const { agents } = await client.agents.list();
    expect(agents.map((a) => a.id)).toContain(agent.id);

    const { session } = await client.sessions.create(agent.id, { end_user_id: 'u-1' });
    const page = await client.sessions.list(agent.id, { limit: 10 });
    expect(page.total).toBe(1);
    expect((await client.sessions.retrieve(session.id)).session.context.end_user_id).toBe('u-1');
    // Out of range is clamped by the server (limit 0 → 1), as the spec's other lists do.
    expect((await client.sessions.list(agent.id, { limit: 0 })).sessions).toHaveLength(1);
    expect(await client.sessions.delete(session.id)).toEqual({ deleted: true });
    expect(await client.agents.delete(agent.id)).toEqual({ deleted: true });
    const err = await client.agents.retrieve(agent.id).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as NotFoundError).message).toBe('Agent not found');
  });
});

describe('sessions.send', () => {
  it('streams a turn, runs integrator tool handlers, and returns the final text', async () => {
    const { agent } = await client.agents.create({
      name: 'Tools',
      config: { customTools: [{ name: 'get_time' }, { name: 'explode' }] },
    });
    const { session } = await client.sessions.create(agent.id);
    ts.fake.script(
      {
        toolCalls: [
          { id: 't1', name: 'get_time', arguments: '{"tz":"UTC"}' },
          { id: 't2', name: 'explode', arguments: '{}' },
        ],
      },
      { text: 'It is noon.' },
    );
    const seenArgs: unknown[] = [];
    const deltas: string[] = [];
    const stream = client.sessions
      .send(session.id, 'What time is it?', {
        tools: {
          get_time: (args) => {
            seenArgs.push(args);
            return { time: '12:00' };
          },
          explode: () => {
            throw new Error('kaboom');
          },
        },
      })
      .on('message.delta', (e) => deltas.push(e.content));
    expect(await stream.finalText()).toBe('It is noon.');
    expect(deltas.join('')).toBe('It is noon.');
    expect(seenArgs).toEqual([{ tz: 'UTC' }]);
    const events = await stream.done();
    const completed = events.filter((e) => e.type === 'tool_call.completed');
    expect(completed.map((e) => (e as any).status).sort()).toEqual(['completed', 'error']);
    expect(completed.find((e) => (e as any).status === 'error')).toMatchObject({ error: 'kaboom' });
    // the model received both results
    const toolMsgs = ts.fake.requests.at(-1)?.body.messages.filter((m: any) => m.role === 'tool');
    expect(toolMsgs.map((m: any) => m.content).sort()).toEqual(['{"error":"kaboom"}', '{"time":"12:00"}']);

    const timeline = await client.sessions.events(session.id);
    expect(timeline.events[0]?.type).toBe('turn_run');
  });

  it('cancels a running turn and finalText rejects with AgentRunError', async () => {
    const { agent } = await client.agents.create({ name: 'Cancel' });
    const { session } = await client.sessions.create(agent.id);
    ts.fake.script({ text: 'y'.repeat(300), chunkSize: 2, paceMs: 20 });
    const stream = client.sessions.send(session.id, 'talk');
    let cancelled: Promise<unknown> | undefined;
    stream.on('message.delta', () => {
      cancelled ??= stream.cancel();
    });
    const err = await stream.finalText().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AgentRunError);
    expect((err as AgentRunError).status).toBe('cancelled');
    expect(await cancelled).toMatchObject({ status: 'cancelled' });
  });

  it('reconnects with Last-Event-ID and rejects a concurrent turn with ConflictError', async () => {
    const { agent } = await client.agents.create({
      name: 'Reattach',
      config: { customTools: [{ name: 'later' }] },
    });
    const { session } = await client.sessions.create(agent.id);
    ts.fake.script(
      { toolCalls: [{ id: 'l1', name: 'later', arguments: '{}' }] },
      { text: 'Finished later.' },
    );
    const first = client.sessions.send(session.id, 'start');
    const seen: AgentEvent[] = [];
    let pendingId = '';
    let lastId = 0;
    for await (const e of first) {
      seen.push(e);
      lastId++;
      if (e.type === 'tool_call.pending') {
        pendingId = e.toolCallId;
        break; // the client drops
      }
    }
    const busy = await client.sessions
      .send(session.id, 'again')
      .done()
      .catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(ConflictError);

    await client.sessions.submitToolResult(session.id, { toolCallId: pendingId, result: 'ok' });
    const resumed = client.sessions.stream(session.id, first.runId as string, { lastEventId: lastId });
    expect(await resumed.finalText()).toBe('Finished later.');
    const rest = await resumed.done();
    expect(rest[0]?.type).toBe('tool_call.completed');
    expect([...seen, ...rest].map((e) => e.type)).not.toContain(undefined);
    expect(seen.filter((e) => rest.includes(e))).toEqual([]);
  });
});

describe('automatic reconnect', () => {
  it('re-attaches with Last-Event-ID when the connection drops mid-turn, losing nothing', async () => {
    const http = await import('node:http');
    const target = new URL(ts.url);
    let cut = false;
    // A proxy that breaks the first turn stream right after the pending tool call went through.
    const proxy = http.createServer((req, res) => {
      const up = http.request(
        { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
        (upRes) => {
          res.writeHead(upRes.statusCode ?? 502, upRes.headers);
          upRes.on('data', (chunk: Buffer) => {
            res.write(chunk);
            if (!cut && req.url?.endsWith('/messages') && chunk.toString().includes('tool_call.pending')) {
              cut = true;
              upRes.destroy();
              res.socket?.destroy();
            }
          });
          upRes.on('end', () => res.end());
        },
      );
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const port = (proxy.address() as { port: number }).port;
    try {
      const viaProxy = new AiSuite({
        baseURL: `http://127.0.0.1:${port}`,
        apiKey: (client as any).apiKey,
        maxRetries: 0,
      });
      const { agent } = await viaProxy.agents.create({
        name: 'Flaky',
        config: { customTools: [{ name: 'slow' }] },
      });
      const { session } = await viaProxy.sessions.create(agent.id);
      ts.fake.script(
        { toolCalls: [{ id: 'f1', name: 'slow', arguments: '{}' }] },
        { text: 'Survived the drop.' },
      );
      const stream = viaProxy.sessions.send(session.id, 'go', { tools: { slow: () => 'done' } });
      const ids: string[] = [];
      stream.on('*', (e) => ids.push(e.type));
      expect(await stream.finalText()).toBe('Survived the drop.');
      expect(cut).toBe(true);
      const events = await stream.done();
      expect(events.map((e) => e.type).filter((t) => t === 'tool_call.pending')).toHaveLength(1);
      expect(events.map((e) => e.type).filter((t) => t === 'run.started')).toHaveLength(1);
      expect(events.at(-1)?.type).toBe('run.completed');
    } finally {
      proxy.closeAllConnections();
      await new Promise<void>((r) => proxy.close(() => r()));
    }
  });
});
