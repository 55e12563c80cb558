import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runExample, startQuoteServer } from './main.js';

let ts: TestServer & { fake: FakeOpenAI };
let apiKey: string;

beforeAll(async () => {
  // The callback server of the example listens on loopback: the operator allowlist permits it.
  ts = await startTestServerWithFakeModel({ env: { OUTBOUND_ALLOWLIST: '127.0.0.1' } });
  apiKey = (await createTestWorkspace(ts, { creditsUsd: '5' })).apiKey;
});
afterAll(() => ts?.close());

describe('examples/agent-custom-tools', () => {
  it('runs an integrator-owned tool and a signed callback tool end to end', async () => {
    ts.fake.script(
      {
        toolCalls: [
          { id: 'u1', name: 'lookup_order', arguments: '{"orderId":"A-17"}' },
          { id: 'u2', name: 'get_shipping_quote', arguments: '{"country":"NO"}' },
        ],
      },
      { text: 'Order A-17 has shipped; shipping to Norway costs 19 EUR.' },
    );
    const result = await runExample({ baseURL: ts.url, apiKey });
    expect(result.answer).toBe('Order A-17 has shipped; shipping to Norway costs 19 EUR.');
    expect(result.lookups).toEqual(['A-17']);
    expect(result.events[0]).toBe('run.started');
    expect(result.events).toContain('tool_call.pending');
    expect(result.events).toContain('tool_call.started');
    expect(result.events.at(-1)).toBe('run.completed');
    const toolMsgs = ts.fake.requests.at(-1)?.body.messages.filter((m: any) => m.role === 'tool');
    const results = toolMsgs.map((m: any) => JSON.parse(m.content));
    expect(results).toContainEqual({ carrier: 'PostNord', priceEur: 19 });
    expect(results).toContainEqual({ orderId: 'A-17', status: 'shipped', eta: '2 days' });
  });

  it('answers 401 to an unsigned or wrongly signed call', async () => {
    const quotes = await startQuoteServer(() => `whsec_${Buffer.alloc(32, 3).toString('base64')}`);
    try {
      const body = '{"tool":"get_shipping_quote","arguments":{"country":"NO"}}';
      const unsigned = await fetch(quotes.url, { method: 'POST', body });
      expect(unsigned.status).toBe(401);
      const forged = await fetch(quotes.url, {
        method: 'POST',
        body,
        headers: {
          'webhook-id': 'cb_1',
          'webhook-timestamp': String(Math.floor(Date.now() / 1000)),
          'webhook-signature': `v1,${Buffer.alloc(32).toString('base64')}`,
        },
      });
      expect(forged.status).toBe(401);
    } finally {
      await quotes.close();
    }
  });
});
