import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, jsonSchema, stepCountIs, tool } from 'ai';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestWorkspace, startTestServerWithFakeModel, type TestWorkspace } from '../../test/harness.js';

let ts: Awaited<ReturnType<typeof startTestServerWithFakeModel>>;
let ws: TestWorkspace;
let other: TestWorkspace;
let client: OpenAI;
let plainAgent: string;
let toolAgent: string;
beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RATE_LIMIT_CHAT: '1000' } });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  other = await createTestWorkspace(ts, { creditsUsd: '10' });
  client = new OpenAI({ baseURL: `${ts.url}/api/v1/openai`, apiKey: ws.apiKey, maxRetries: 0 });
  plainAgent = await createAgent(ws.apiKey, { name: 'Plain', prompt: 'You are terse.' });
  toolAgent = await createAgent(ws.apiKey, {
    name: 'Warehouse',
    prompt: 'Look parcels up.',
    config: {
      customTools: [
        {
          name: 'lookup',
          description: 'Status of a parcel',
          inputSchema: { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] },
        },
      ],
    },
  });
});
afterAll(() => ts?.close());
beforeEach(() => ts.fake.reset());

async function createAgent(key: string, body: Record<string, unknown>): Promise<string> {
  const res = await ts.api('/managed-agents/agents', { method: 'POST', key, json: body });
  if (res.status !== 201) throw new Error(`create agent: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { agent: { id: string } }).agent.id;
}

const sql = <T>(q: string, params: unknown[] = []) => ts.server.deps.em().execute<T[]>(q, params);
const post = (json: unknown, key = ws.apiKey) =>
  ts.api('/openai/chat/completions', { method: 'POST', key, json });

describe('agents as models', () => {
  it('GET /models lists the catalog and the workspace’s agents; another workspace’s agent is not found', async () => {
    const list = await client.models.list();
    const ids = list.data.map((m) => m.id);
    expect(ids).toEqual(
      expect.arrayContaining(['fake-chat', 'fake-embed', `agent/${plainAgent}`, `agent/${toolAgent}`]),
    );
    expect((await client.models.retrieve(`agent/${plainAgent}`)).id).toBe(`agent/${plainAgent}`);
    expect((await client.models.retrieve('fake-chat')).object).toBe('model');
    const foreign = await createAgent(other.apiKey, { name: 'Theirs' });
    expect(ids).not.toContain(`agent/${foreign}`);
    await expect(client.models.retrieve(`agent/${foreign}`)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const err = await client.chat.completions
      .create({ model: `agent/${foreign}`, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 404, code: 'model_not_found' });
    expect(ts.fake.requests).toHaveLength(0);
  });

  it('runs a turn: the reply in chat-completions shape, the session in x-agent-session-id, credits charged', async () => {
    ts.fake.script({ text: ['Hello ', 'there.'], usage: { prompt_tokens: 10, completion_tokens: 2 } });
    const { data, response } = await client.chat.completions
      .create({ model: `agent/${plainAgent}`, messages: [{ role: 'user', content: 'Hi' }] })
      .withResponse();
    expect(data.choices[0]?.message.content).toBe('Hello there.');
    expect(data.choices[0]?.finish_reason).toBe('stop');
    expect(data.model).toBe(`agent/${plainAgent}`);
    const sessionId = response.headers.get('x-agent-session-id') as string;
    const [session] = await sql<{ app_id: string; workspace_id: string }>(
      'select * from agent_sessions where id = ?',
      [sessionId],
    );
    expect(session).toMatchObject({ app_id: plainAgent, workspace_id: ws.workspaceId });
    expect(ts.fake.requests[0]?.body.messages).toEqual([
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hi' },
    ]);
    await expect
      .poll(async () =>
        (
          await sql<{ endpoint: string; meter: string }>(
            'select endpoint, meter from usage_records where session_id = ?',
            [sessionId],
          )
        ).map((r) => `${r.endpoint} ${r.meter}`),
      )
      .toEqual(['/managed-agents/sessions/{sessionId}/messages credits']);
  });

  it('`user` picks the session: the same user continues one, a new user opens another; without it each request is seeded', async () => {
    ts.fake.script({ text: 'one' }, { text: 'two' }, { text: 'three' }, { text: 'four' });
    const ask = (user: string | undefined, messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[]) =>
      client.chat.completions
        .create({ model: `agent/${plainAgent}`, messages, ...(user ? { user } : {}) })
        .withResponse()
        .then(({ response }) => response.headers.get('x-agent-session-id'));
    const a1 = await ask('alice', [{ role: 'user', content: 'first' }]);
    const a2 = await ask('alice', [{ role: 'user', content: 'second' }]);
    const b1 = await ask('bob', [{ role: 'user', content: 'first' }]);
    expect(a2).toBe(a1);
    expect(b1).not.toBe(a1);
    const seeded = await ask(undefined, [
      { role: 'system', content: 'Answer in French.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Salut' },
      { role: 'user', content: 'How are you?' },
    ]);
    expect([a1, b1]).not.toContain(seeded);
    expect(ts.fake.requests[3]?.body.messages).toEqual([
      { role: 'system', content: 'You are terse.' },
      { role: 'system', content: 'Answer in French.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Salut' },
      { role: 'user', content: 'How are you?' },
    ]);
    const turns = await sql<{ n: string }>(
      `select count(*) as n from runs where session_id = ? and kind = 'turn'`,
      [a1],
    );
    expect(Number(turns[0]?.n)).toBe(2);
  });

  it('an integrator-owned tool surfaces as tool_calls (id = toolCallId); the tool message resumes the turn', async () => {
    ts.fake.script(
      { toolCalls: [{ id: 'model_call_1', name: 'lookup', arguments: '{"id":"A-17"}' }] },
      { text: 'A-17 has shipped.' },
    );
    const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
      { role: 'user', content: 'Where is A-17?' },
    ];
    const first = await client.chat.completions.create({ model: `agent/${toolAgent}`, messages });
    const choice = first.choices[0];
    expect(choice?.finish_reason).toBe('tool_calls');
    const call = choice?.message
      .tool_calls?.[0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expect(call.function).toEqual({ name: 'lookup', arguments: '{"id":"A-17"}' });
    const [row] = await sql<{ status: string; name: string }>('select * from tool_calls where id = ?', [
      call.id,
    ]);
    expect(row).toMatchObject({ status: 'pending', name: 'lookup' });

    // A tool message for a call that is not pending (made up) costs nothing and changes nothing.
    const bogus = await post({
      model: `agent/${toolAgent}`,
      messages: [...messages, choice?.message, { role: 'tool', tool_call_id: 'call_made_up', content: '{}' }],
    });
    expect(bogus.status).toBe(404);
    expect((await bogus.json()).error).toMatchObject({
      code: 'tool_call_not_found',
      param: 'messages[2].tool_call_id',
    });

    const second = await client.chat.completions.create({
      model: `agent/${toolAgent}`,
      messages: [
        ...messages,
        choice?.message as OpenAI.Chat.Completions.ChatCompletionMessageParam,
        { role: 'tool', tool_call_id: call.id, content: '{"status":"shipped"}' },
      ],
    });
    expect(second.choices[0]?.message.content).toBe('A-17 has shipped.');
    expect(second.choices[0]?.finish_reason).toBe('stop');
    expect(ts.fake.requests[1]?.body.messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'model_call_1',
      content: '{"status":"shipped"}',
    });

    // Answered: a second answer to the same call is refused.
    const again = await post({
      model: `agent/${toolAgent}`,
      messages: [...messages, choice?.message, { role: 'tool', tool_call_id: call.id, content: '{}' }],
    });
    expect(again.status).toBe(400);
    expect((await again.json()).error).toMatchObject({ code: 'tool_call_not_pending' });
    expect(ts.fake.requests).toHaveLength(2);
  });

  it('streams the round trip; another workspace cannot answer the call; a busy session is 409', async () => {
    ts.fake.script(
      { text: 'Checking. ', toolCalls: [{ id: 'mc', name: 'lookup', arguments: '{"id":"B-2"}' }] },
      { text: ['B-2 ', 'is late.'] },
    );
    const stream = await client.chat.completions.create({
      model: `agent/${toolAgent}`,
      messages: [{ role: 'user', content: 'B-2?' }],
      user: 'carol',
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let callId = '';
    let finish: string | null = null;
    let usage: unknown;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? '';
      callId ||= c.choices[0]?.delta.tool_calls?.[0]?.id ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
      usage = c.usage ?? usage;
    }
    expect({ text, finish }).toEqual({ text: 'Checking. ', finish: 'tool_calls' });
    expect(usage).toMatchObject({ total_tokens: expect.any(Number) });

    // The paused turn keeps carol's session busy.
    const busy = await post({
      model: `agent/${toolAgent}`,
      user: 'carol',
      messages: [{ role: 'user', content: 'hello?' }],
    });
    expect(busy.status).toBe(409);
    expect((await busy.json()).error).toMatchObject({ code: 'turn_in_progress' });

    const intruder = await post(
      {
        model: `agent/${toolAgent}`,
        messages: [
          { role: 'user', content: 'B-2?' },
          { role: 'tool', tool_call_id: callId, content: '{"status":"stolen"}' },
        ],
      },
      other.apiKey,
    );
    expect(intruder.status).toBe(404);

    const resumed = await client.chat.completions.create({
      model: `agent/${toolAgent}`,
      user: 'carol',
      stream: true,
      messages: [
        { role: 'user', content: 'B-2?' },
        {
          role: 'assistant',
          content: 'Checking. ',
          tool_calls: [
            { id: callId, type: 'function', function: { name: 'lookup', arguments: '{"id":"B-2"}' } },
          ],
        },
        { role: 'tool', tool_call_id: callId, content: '{"status":"late"}' },
      ],
    });
    let rest = '';
    for await (const c of resumed) rest += c.choices[0]?.delta.content ?? '';
    expect(rest).toBe('B-2 is late.');
  });

  it('works with the Vercel AI SDK: a client-side tool runs between two requests', async () => {
    ts.fake.script(
      { toolCalls: [{ id: 'mv', name: 'lookup', arguments: '{"id":"C-3"}' }] },
      { text: 'C-3 is in Oslo.' },
    );
    const provider = createOpenAICompatible({
      name: 'aisuite',
      baseURL: `${ts.url}/api/v1/openai`,
      apiKey: ws.apiKey,
    });
    const seen: string[] = [];
    const out = await generateText({
      model: provider(`agent/${toolAgent}`),
      prompt: 'Where is C-3?',
      tools: {
        lookup: tool({
          description: 'Status of a parcel',
          inputSchema: jsonSchema<{ id: string }>({
            type: 'object',
            properties: { id: { type: 'string' } },
            required: ['id'],
          }),
          execute: async ({ id }) => {
            seen.push(id);
            return { city: 'Oslo' };
          },
        }),
      },
      stopWhen: stepCountIs(3),
    });
    expect(seen).toEqual(['C-3']);
    expect(out.text).toBe('C-3 is in Oslo.');
    expect(ts.fake.requests[1]?.body.messages.at(-1)).toMatchObject({
      role: 'tool',
      content: '{"city":"Oslo"}',
    });
  });

  it('refuses what an agent model cannot honour, before any turn', async () => {
    const cases: [Record<string, unknown>, number, Record<string, unknown>][] = [
      [{ temperature: 0.5 }, 400, { param: 'temperature' }],
      [
        { tools: [{ type: 'function', function: { name: 'rm_rf' } }] },
        400,
        { param: 'tools[0].function.name' },
      ],
      [{ messages: [{ role: 'assistant', content: 'x' }] }, 400, { param: 'messages[0].role' }],
      [{ model: 'agent/not-a-uuid' }, 404, { code: 'model_not_found' }],
    ];
    for (const [patch, status, shape] of cases) {
      const res = await post({
        model: `agent/${toolAgent}`,
        messages: [{ role: 'user', content: 'x' }],
        ...patch,
      });
      expect(res.status, JSON.stringify(patch)).toBe(status);
      expect((await res.json()).error).toMatchObject(shape);
    }
    expect(ts.fake.requests).toHaveLength(0);
  });

  it('429 insufficient_quota when the workspace has no credits, before any turn', async () => {
    const broke = await createTestWorkspace(ts);
    const agentId = await createAgent(broke.apiKey, { name: 'Broke' });
    const c = new OpenAI({ baseURL: `${ts.url}/api/v1/openai`, apiKey: broke.apiKey, maxRetries: 0 });
    const err = await c.chat.completions
      .create({ model: `agent/${agentId}`, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect(err).toMatchObject({ code: 'insufficient_quota', type: 'insufficient_quota' });
    const runs = await sql<{ n: string }>('select count(*) as n from runs where app_id = ?', [agentId]);
    expect(Number(runs[0]?.n)).toBe(0);
    const sessions = await sql<{ n: string }>('select count(*) as n from agent_sessions where app_id = ?', [
      agentId,
    ]);
    expect(Number(sessions[0]?.n)).toBe(0);
    expect(ts.fake.requests).toHaveLength(0);
  });
});
