import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { AiSuite, verifyWebhook } from '@ai-suite/sdk';

/** A callback server for the `get_shipping_quote` tool: answers `{ result }` to signed calls. */
export async function startQuoteServer(getSecret: () => string) {
  const server = http.createServer(async (req, res) => {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    // Standard Webhooks signature (webhook-id, webhook-timestamp, webhook-signature) on the raw
    // body, stale timestamps refused: any Standard Webhooks verifier does the same.
    const call = await verifyWebhook<{ tool: string; arguments: { country?: string } }>(
      raw,
      req.headers,
      getSecret(),
    ).catch(() => undefined);
    if (!call) {
      res
        .writeHead(401, { 'content-type': 'application/json' })
        .end(JSON.stringify({ error: 'bad signature' }));
      return;
    }
    const price = call.arguments.country === 'NO' ? 19 : 9;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ result: { carrier: 'PostNord', priceEur: price } }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/quote`,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

export interface ExampleResult {
  answer: string;
  events: string[];
  lookups: string[];
}

/**
 * Creates an agent with two custom tools, opens a session and sends one message:
 * - `lookup_order` has no callbackUrl: the integrator owns it; the SDK runs the handler
 *   below when the agent asks and posts the result back (the turn pauses meanwhile);
 * - `get_shipping_quote` has a callbackUrl: the service POSTs the signed call to it.
 */
export async function runExample(
  opts: { baseURL?: string; apiKey?: string; log?: (line: string) => void } = {},
) {
  const log = opts.log ?? (() => undefined);
  const client = new AiSuite({ baseURL: opts.baseURL, apiKey: opts.apiKey });
  let secret = '';
  const quotes = await startQuoteServer(() => secret);
  try {
    const { agent } = await client.agents.create({
      name: 'Order helper',
      prompt: 'You help customers with their orders. Use the tools.',
      config: {
        customTools: [
          {
            name: 'lookup_order',
            description: 'Looks up an order by id',
            inputSchema: {
              type: 'object',
              properties: { orderId: { type: 'string' } },
              required: ['orderId'],
            },
          },
          {
            name: 'get_shipping_quote',
            description: 'Quotes shipping to a country',
            inputSchema: {
              type: 'object',
              properties: { country: { type: 'string' } },
              required: ['country'],
            },
            callbackUrl: quotes.url,
          },
        ],
      },
    });
    secret = (await client.agents.retrieve(agent.id)).agent.callbackSecret;
    const { session } = await client.sessions.create(agent.id, { end_user_id: 'customer-42' });

    const lookups: string[] = [];
    const events: string[] = [];
    const stream = client.sessions
      .send(session.id, 'Where is order A-17, and what does shipping to Norway cost?', {
        tools: {
          lookup_order: async ({ orderId }: { orderId: string }) => {
            lookups.push(orderId);
            return { orderId, status: 'shipped', eta: '2 days' };
          },
        },
      })
      .on('*', (e) => {
        events.push(e.type);
        if (e.type === 'tool_call.pending' || e.type === 'tool_call.started')
          log(`→ ${e.name}(${JSON.stringify(e.arguments)})`);
        if (e.type === 'tool_call.completed') log(`← ${e.name}: ${JSON.stringify(e.result ?? e.error)}`);
      });
    const answer = await stream.finalText();
    log(answer);
    await client.agents.delete(agent.id);
    return { answer, events, lookups } satisfies ExampleResult;
  } finally {
    await quotes.close();
  }
}

const isMain =
  process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname);
if (isMain) {
  parseArgs({ allowPositionals: true }); // takes no arguments; a stray `--` is harmless
  runExample({ log: (line) => console.log(line) }).catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
