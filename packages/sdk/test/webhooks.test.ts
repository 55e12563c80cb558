import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { type HttpFixture, type RecordedHttpRequest, startHttpFixture } from '@ai-suite/testkit';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AiSuite, type ToolCallWebhook, verifyWebhook, WebhookVerificationError } from '../src/index.js';

let ts: TestServer & { fake: FakeOpenAI };
let client: AiSuite;
let receiver: HttpFixture;

beforeAll(async () => {
  receiver = await startHttpFixture(() => ({ body: { result: { temperature: 21 } } }));
  ts = await startTestServerWithFakeModel({ env: { OUTBOUND_ALLOWLIST: '127.0.0.1' } });
  const ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, maxRetries: 0 });
});
afterAll(async () => {
  await ts?.close();
  await receiver?.close();
});

/** One real callback delivery of the service, and the secret of the agent that sent it. */
async function realDelivery(): Promise<{ req: RecordedHttpRequest; secret: string }> {
  const { agent } = await client.agents.create({
    name: 'Weather',
    config: { customTools: [{ name: 'get_weather', callbackUrl: `${receiver.url}/hook` }] },
  });
  const secret = (await client.agents.retrieve(agent.id)).agent.callbackSecret;
  const { session } = await client.sessions.create(agent.id);
  ts.fake.script(
    { toolCalls: [{ id: 'w1', name: 'get_weather', arguments: '{"city":"Oslo"}' }] },
    { text: 'It is 21 degrees.' },
  );
  const before = receiver.requests.length;
  expect(await client.sessions.send(session.id, 'Weather?').finalText()).toBe('It is 21 degrees.');
  const req = receiver.requests[before];
  if (!req) throw new Error('no callback was delivered');
  return { req, secret };
}

describe('verifyWebhook', () => {
  it('accepts a real delivery, as the standardwebhooks package does, and rejects a tampered one', async () => {
    const { req, secret } = await realDelivery();
    const headers = req.headers as Record<string, string>;
    const event = await verifyWebhook<ToolCallWebhook>(req.rawBody, headers, secret);
    expect(event).toMatchObject({ type: 'tool_call', tool: 'get_weather', arguments: { city: 'Oslo' } });
    expect(new Webhook(secret).verify(req.rawBody, headers)).toEqual(event);
    // Bytes and a fetch Headers object work too.
    const asHeaders = new Headers(Object.entries(headers).filter((e): e is [string, string] => !!e[1]));
    expect(await verifyWebhook(new TextEncoder().encode(req.rawBody), asHeaders, secret)).toEqual(event);

    const tampered = req.rawBody.replace('Oslo', 'Rome');
    await expect(verifyWebhook(tampered, headers, secret)).rejects.toThrow('No matching signature found');
    const otherSecret = `whsec_${Buffer.alloc(32, 1).toString('base64')}`;
    await expect(verifyWebhook(req.rawBody, headers, otherSecret)).rejects.toBeInstanceOf(
      WebhookVerificationError,
    );
    const { 'webhook-signature': _dropped, ...unsigned } = headers;
    await expect(verifyWebhook(req.rawBody, unsigned, secret)).rejects.toThrow('Missing required headers');
    // A replay outside the tolerance is refused although correctly signed.
    const later = new Date((Number(headers['webhook-timestamp']) + 301) * 1000);
    await expect(verifyWebhook(req.rawBody, headers, secret, { now: later })).rejects.toThrow(
      'Message timestamp too old',
    );
  });

  it('verifies what the reference implementation signs, with several signatures (rotation)', async () => {
    const secret = `whsec_${Buffer.from('0123456789abcdef0123456789abcdef').toString('base64')}`;
    const body = JSON.stringify({ type: 'run.completed', id: 'r1', runId: 'r1' });
    const now = new Date();
    const signature = new Webhook(secret).sign('r1', now, body);
    const headers = {
      'webhook-id': 'r1',
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': `v1,${Buffer.alloc(32).toString('base64')} ${signature}`,
    };
    expect(await verifyWebhook(body, headers, secret)).toEqual(JSON.parse(body));
    await expect(verifyWebhook(body, { ...headers, 'webhook-id': 'r2' }, secret)).rejects.toThrow(
      'No matching signature found',
    );
  });
});
