import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { createAgentWithSession, openTurn, postToolResult } from './test-helpers.js';

// The worker's poll is ten minutes here: a run that starts in these tests was started by a
// wake-up or by the end of the run before it, never by the poll (decision 0021).
let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    env: { RUN_POLL_INTERVAL_MS: '600000', RUN_TURN_CONCURRENCY: '2' },
  });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
});
afterAll(async () => {
  await ts?.close();
});

const claims = () => ts.server.deps.runs.claimAttempts;

describe('claims after a run ends', () => {
  it('a turn that ends with nothing queued behind it makes no claim', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Quiet' });
    // A first turn, so the loop's claims of the start are behind us.
    ts.fake.script({ text: 'warm' });
    await (await openTurn(ts, ws.apiKey, sessionId, { message: 'warm up' })).rest();
    const before = claims();
    for (let i = 0; i < 5; i++) {
      ts.fake.script({ text: `reply ${i}` });
      const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: `m${i}` })).rest();
      expect(events.at(-1)?.data.type).toBe('run.completed');
    }
    expect(claims()).toBe(before);
  });

  it('turns queued behind a running one start when it ends, each after the one before', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Queue',
      config: { customTools: [{ name: 'wait_for_human' }] },
    });
    ts.fake.script({ toolCalls: [{ id: 'w1', name: 'wait_for_human', arguments: '{}' }] });
    const first = await openTurn(ts, ws.apiKey, sessionId, { message: 'one' });
    const pending = await first.until('tool_call.pending');
    ts.fake.script({ text: 'first done' }, { text: 'second done' }, { text: 'third done' });
    const second = await openTurn(ts, ws.apiKey, sessionId, { message: 'two', concurrency: 'queue' });
    const third = await openTurn(ts, ws.apiKey, sessionId, { message: 'three', concurrency: 'queue' });
    await postToolResult(ts, ws.apiKey, sessionId, { toolCallId: pending.data.toolCallId, result: 'ok' });
    expect((await first.rest()).at(-1)?.data.type).toBe('run.completed');
    const done = async (t: typeof second) =>
      (await t.rest()).find((e) => e.data.type === 'message.completed')?.data.content;
    expect(await done(second)).toBe('second done');
    expect(await done(third)).toBe('third done');
  });

  it('a turn that found no free slot starts when a slot frees', async () => {
    // RUN_TURN_CONCURRENCY=2: two turns waiting on a tool call fill this process's slots.
    const a = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Slot A',
      config: { customTools: [{ name: 'wait_for_human' }] },
    });
    const b = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Slot B',
      config: { customTools: [{ name: 'wait_for_human' }] },
    });
    const c = await createAgentWithSession(ts, ws.apiKey, { name: 'Slot C' });
    ts.fake.script(
      { toolCalls: [{ id: 'a1', name: 'wait_for_human', arguments: '{}' }] },
      { toolCalls: [{ id: 'b1', name: 'wait_for_human', arguments: '{}' }] },
    );
    const ta = await openTurn(ts, ws.apiKey, a.sessionId, { message: 'a' });
    const pa = await ta.until('tool_call.pending');
    const tb = await openTurn(ts, ws.apiKey, b.sessionId, { message: 'b' });
    const pb = await tb.until('tool_call.pending');
    // Parked runs release their lease: a slot is taken only while a turn runs. Resume both and
    // hold their model calls open, so C is admitted with no slot left.
    let open!: () => void;
    const gate = new Promise<void>((r) => {
      open = r;
    });
    const chatRequests = () => ts.fake.requests.filter((r) => r.path.endsWith('/chat/completions')).length;
    const seen = chatRequests();
    ts.fake.script(
      { text: 'resumed', waitFor: gate },
      { text: 'resumed', waitFor: gate },
      { text: 'c done' },
    );
    await postToolResult(ts, ws.apiKey, a.sessionId, { toolCallId: pa.data.toolCallId, result: 'ok' });
    await postToolResult(ts, ws.apiKey, b.sessionId, { toolCallId: pb.data.toolCallId, result: 'ok' });
    await ts.fake.waitForRequests(seen + 2);
    const tc = await openTurn(ts, ws.apiKey, c.sessionId, { message: 'c' });
    open();
    expect((await ta.rest()).at(-1)?.data.type).toBe('run.completed');
    expect((await tb.rest()).at(-1)?.data.type).toBe('run.completed');
    const cEvents = await tc.rest();
    expect(cEvents.at(-1)?.data.type).toBe('run.completed');
    expect(cEvents.find((e) => e.data.type === 'message.completed')?.data.content).toBe('c done');
  });
});
