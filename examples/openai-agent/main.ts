import path from 'node:path';
import { parseArgs } from 'node:util';
import { AiSuite } from '@ai-suite/sdk';
import OpenAI from 'openai';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';

export interface ExampleResult {
  answer: string;
  /** Every `lookup_order` call the agent asked this program to run. */
  lookups: string[];
  /** Requests sent to the OpenAI-compatible surface. */
  requests: number;
  sessionId: string | null;
}

/** The integrator-owned tool: runs here, in the caller's process, never on the server. */
function lookupOrder(args: { orderId?: string }) {
  return { orderId: args.orderId, status: 'shipped', eta: '2 days' };
}

/**
 * Creates an agent whose `lookup_order` tool has no callbackUrl (the integrator owns it), then
 * talks to it with the official `openai` client as the model `agent/<agentId>`: when the reply
 * ends with `finish_reason: "tool_calls"`, runs the tool here and sends the result back as a
 * `tool` message, which resumes the agent's paused turn, until the agent answers.
 */
export async function runExample(
  opts: { baseURL?: string; apiKey?: string; log?: (line: string) => void } = {},
): Promise<ExampleResult> {
  const log = opts.log ?? (() => undefined);
  const suite = new AiSuite({ baseURL: opts.baseURL, apiKey: opts.apiKey });
  const { agent } = await suite.agents.create({
    name: 'Order helper',
    prompt: 'You help customers with their orders. Use the tools.',
    config: {
      customTools: [
        {
          name: 'lookup_order',
          description: 'Looks up an order by id',
          inputSchema: { type: 'object', properties: { orderId: { type: 'string' } }, required: ['orderId'] },
        },
      ],
    },
  });
  // { baseURL: '<server>/api/v1/openai', apiKey }: what any OpenAI client takes.
  const openai = new OpenAI(suite.openAICompatible());
  const model = `agent/${agent.id}`;
  const messages: ChatCompletionMessageParam[] = [{ role: 'user', content: 'Where is order A-17?' }];
  const lookups: string[] = [];
  let requests = 0;
  let sessionId: string | null = null;
  try {
    for (;;) {
      const { data, response } = await openai.chat.completions.create({ model, messages }).withResponse();
      requests++;
      sessionId ??= response.headers.get('x-agent-session-id');
      const choice = data.choices[0];
      if (!choice) throw new Error('no choice in the reply');
      if (choice.finish_reason !== 'tool_calls') {
        const answer = choice.message.content ?? '';
        log(answer);
        return { answer, lookups, requests, sessionId };
      }
      // The paused turn's calls: run each, answer with a `tool` message carrying its id.
      messages.push(choice.message);
      for (const call of choice.message.tool_calls ?? []) {
        if (call.type !== 'function') continue;
        const args = JSON.parse(call.function.arguments) as { orderId?: string };
        log(`→ ${call.function.name}(${call.function.arguments})`);
        lookups.push(String(args.orderId));
        const result = lookupOrder(args);
        log(`← ${JSON.stringify(result)}`);
        messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify(result) });
      }
    }
  } finally {
    await suite.agents.delete(agent.id);
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
