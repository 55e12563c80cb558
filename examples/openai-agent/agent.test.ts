import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runExample } from './main.js';

let ts: TestServer & { fake: FakeOpenAI };
let apiKey: string;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  apiKey = (await createTestWorkspace(ts, { creditsUsd: '5' })).apiKey;
});
afterAll(() => ts?.close());

describe('examples/openai-agent', () => {
  it('drives an agent with the official openai client through an integrator tool round trip', async () => {
    ts.fake.script(
      { toolCalls: [{ id: 'u1', name: 'lookup_order', arguments: '{"orderId":"A-17"}' }] },
      { text: 'Order A-17 has shipped and arrives in 2 days.' },
    );
    const result = await runExample({ baseURL: ts.url, apiKey });
    expect(result.answer).toBe('Order A-17 has shipped and arrives in 2 days.');
    expect(result.lookups).toEqual(['A-17']);
    expect(result.requests).toBe(2);
    expect(result.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    // The model saw the tool's result as computed by the example, under its own call id.
    const last = ts.fake.requests.at(-1)?.body.messages.at(-1);
    expect(last).toMatchObject({ role: 'tool', tool_call_id: 'u1' });
    expect(JSON.parse(last.content)).toEqual({ orderId: 'A-17', status: 'shipped', eta: '2 days' });
  });
});
