import http from 'node:http';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, streamText } from 'ai';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createTestSession,
  createTestWorkspace,
  fakeOpenAIEnv,
  lockChatRateLimitRow,
  startTestServer,
  startTestServerWithFakeModel,
  type TestWorkspace,
} from '../../test/harness.js';

let ts: Awaited<ReturnType<typeof startTestServerWithFakeModel>>;
let ws: TestWorkspace;
let client: OpenAI;
beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RATE_LIMIT_CHAT: '1000' } });
  ws = await createTestWorkspace(ts);
  client = new OpenAI({ baseURL: `${ts.url}/api/v1/openai`, apiKey: ws.apiKey, maxRetries: 0 });
});
afterAll(() => ts?.close());
beforeEach(() => ts.fake.reset());

const sql = <T>(q: string, params: unknown[] = []) => ts.server.deps.em().execute<T[]>(q, params);
const usageFor = async (requestId: string) => {
  await expect
    .poll(async () => (await sql('select 1 from usage_records where request_id = ?', [requestId])).length)
    .toBe(1);
  const [row] = await sql<Record<string, string>>('select * from usage_records where request_id = ?', [
    requestId,
  ]);
  return row as Record<string, string>;
};
const post = (json: unknown, key = ws.apiKey, headers: Record<string, string> = {}) =>
  ts.api('/openai/chat/completions', { method: 'POST', key, json, headers });

describe('POST /openai/chat/completions with the official openai client', () => {
  it('answers a chat.completion with usage, metered as /chat under its own endpoint', async () => {
    ts.fake.script({ text: ['Hello', ', world'], usage: { prompt_tokens: 11, completion_tokens: 3 } });
    const { data, response } = await client.chat.completions
      .create({ model: 'fake-chat', messages: [{ role: 'user', content: 'Say hello' }] })
      .withResponse();
    expect(data.object).toBe('chat.completion');
    expect(data.model).toBe('fake-chat');
    expect(data.choices[0]?.message).toMatchObject({ role: 'assistant', content: 'Hello, world' });
    expect(data.choices[0]?.finish_reason).toBe('stop');
    expect(data.usage).toEqual({ prompt_tokens: 11, completion_tokens: 3, total_tokens: 14 });
    expect(response.headers.get('x-ratelimit-limit-requests')).toBe('1000');
    expect(response.headers.get('ratelimit-limit')).toBe('1000');
    const row = await usageFor(response.headers.get('x-request-id') as string);
    expect(row).toMatchObject({
      endpoint: '/openai/chat/completions',
      model: 'fake-chat',
      meter: 'tokens',
      api_key_id: ws.keyId,
      provider_status: 'success',
    });
    expect(Number(row.input_tokens)).toBe(11);
    expect(Number(row.output_tokens)).toBe(3);
  });

  it('streams chat.completion.chunk events, the usage chunk when asked, and [DONE]', async () => {
    ts.fake.script({ text: ['One ', 'two ', 'three'], usage: { prompt_tokens: 5, completion_tokens: 3 } });
    const stream = await client.chat.completions.create({
      model: 'fake-chat',
      messages: [{ role: 'user', content: 'Count' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('One two three');
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    expect(last?.usage).toEqual({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('stop');

    // The wire: one data line per chunk, `usage: null` on the others, then `data: [DONE]`.
    ts.fake.script({ text: ['a', 'b'] });
    const raw = await post({ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], stream: true });
    expect(raw.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const text = await raw.text();
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(text).not.toContain('"usage"');
  });

  it("merges a reply's text over CHAT_STREAM_COALESCE_MS: the first token at once, the rest with the end", async () => {
    // A window far longer than the reply: however late the fake's timers fire on a busy
    // machine, the first token goes alone and the rest leaves with the finishing chunk.
    const windowed = await startTestServer({
      db: ts.db,
      env: { ...fakeOpenAIEnv(ts.fake), RATE_LIMIT_CHAT: '1000', CHAT_STREAM_COALESCE_MS: '1000' },
    });
    try {
      const tokens = Array.from({ length: 12 }, (_, i) => `t${i} `);
      ts.fake.script({ text: tokens, paceMs: 5, usage: { prompt_tokens: 4, completion_tokens: 12 } });
      const c = new OpenAI({ baseURL: `${windowed.url}/api/v1/openai`, apiKey: ws.apiKey, maxRetries: 0 });
      const stream = await c.chat.completions.create({
        model: 'fake-chat',
        messages: [{ role: 'user', content: 'Count' }],
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
      for await (const chunk of stream) chunks.push(chunk);
      const texts = chunks.map((x) => x.choices[0]?.delta.content).filter((t) => t);
      expect(chunks[0]?.choices[0]?.delta).toEqual({ role: 'assistant', content: '' });
      expect(texts[0]).toBe('t0 ');
      expect(texts.join('')).toBe(tokens.join(''));
      expect(texts.length).toBeLessThanOrEqual(3);
      expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('stop');
      expect(chunks.at(-1)?.usage).toEqual({ prompt_tokens: 4, completion_tokens: 12, total_tokens: 16 });
    } finally {
      await windowed.close();
    }
  });

  it('sends the text waiting in the window before a tool call that follows it', async () => {
    const tokens = Array.from({ length: 6 }, (_, i) => `w${i} `);
    ts.fake.script({
      text: tokens,
      paceMs: 3,
      toolCalls: [{ id: 'call_w', name: 'lookup', arguments: '{"q":"x"}' }],
    });
    const stream = await client.chat.completions.create({
      model: 'fake-chat',
      messages: [{ role: 'user', content: 'Look it up' }],
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }],
      stream: true,
    });
    const kinds: string[] = [];
    let text = '';
    let args = '';
    let finish: string | null | undefined;
    for await (const c of stream) {
      const d = c.choices[0]?.delta;
      if (d?.content) {
        kinds.push('text');
        text += d.content;
      }
      if (d?.tool_calls) {
        kinds.push('tool');
        args += d.tool_calls[0]?.function?.arguments ?? '';
      }
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe(tokens.join(''));
    expect(args).toBe('{"q":"x"}');
    expect(finish).toBe('tool_calls');
    // Every piece of text before the first fragment of the call.
    expect(kinds.lastIndexOf('text')).toBeLessThan(kinds.indexOf('tool'));
  });

  it('passes tools, tool_choice, parallel_tool_calls and the sampling options upstream; tool_calls come back', async () => {
    ts.fake.script({ toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' }] });
    const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Weather of a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      },
    ];
    const res = await client.chat.completions.create({
      model: 'fake-chat',
      messages: [{ role: 'user', content: 'Weather in Oslo?' }],
      tools,
      tool_choice: 'auto',
      parallel_tool_calls: false,
      temperature: 0.2,
      top_p: 0.9,
      stop: ['END'],
      seed: 7,
      user: 'end-user-1',
      max_completion_tokens: 100,
      frequency_penalty: 0.1,
      presence_penalty: 0.2,
    });
    expect(res.choices[0]?.finish_reason).toBe('tool_calls');
    expect(res.choices[0]?.message.content).toBeNull();
    expect(res.choices[0]?.message.tool_calls).toEqual([
      { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
    ]);
    expect(ts.fake.requests[0]?.body).toMatchObject({
      model: 'fake-chat',
      tools,
      tool_choice: 'auto',
      parallel_tool_calls: false,
      temperature: 0.2,
      top_p: 0.9,
      stop: ['END'],
      seed: 7,
      user: 'end-user-1',
      max_completion_tokens: 100,
      frequency_penalty: 0.1,
      presence_penalty: 0.2,
    });

    // Streamed: the call's fragments arrive as deltas; the second round carries the result.
    ts.fake.script({ toolCalls: [{ id: 'call_2', name: 'get_weather', arguments: '{"city":"Bergen"}' }] });
    const stream = await client.chat.completions.create({
      model: 'fake-chat',
      messages: [{ role: 'user', content: 'Weather in Bergen?' }],
      tools,
      stream: true,
    });
    let args = '';
    let id: string | undefined;
    let finish: string | null | undefined;
    for await (const c of stream) {
      const tc = c.choices[0]?.delta.tool_calls?.[0];
      if (tc?.id) id = tc.id;
      args += tc?.function?.arguments ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect({ id, args, finish }).toEqual({ id: 'call_2', args: '{"city":"Bergen"}', finish: 'tool_calls' });
    ts.fake.script({ text: 'Sunny.' });
    const answer = await client.chat.completions.create({
      model: 'fake-chat',
      messages: [
        { role: 'user', content: 'Weather in Bergen?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: args } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_2', content: '{"sky":"clear"}' },
      ],
      tools,
    });
    expect(answer.choices[0]?.message.content).toBe('Sunny.');
    expect(ts.fake.requests.at(-1)?.body.messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'call_2',
      content: '{"sky":"clear"}',
    });
  });

  it('forwards response_format json_object and json_schema, and max_tokens', async () => {
    ts.fake.script({ text: '{"a":1}' }, { text: '{"name":"x"}' });
    await client.chat.completions.create({
      model: 'fake-chat',
      messages: [{ role: 'user', content: 'json please' }],
      response_format: { type: 'json_object' },
      max_tokens: 50,
    });
    const schema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
    const res = await client.chat.completions.create({
      model: 'fake-chat',
      messages: [
        { role: 'system', content: 'Be exact.' },
        { role: 'user', content: 'name?' },
      ],
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } },
    });
    expect(JSON.parse(res.choices[0]?.message.content ?? '')).toEqual({ name: 'x' });
    expect(ts.fake.requests[0]?.body).toMatchObject({
      response_format: { type: 'json_object' },
      max_tokens: 50,
    });
    expect(ts.fake.requests[1]?.body.response_format).toEqual({
      type: 'json_schema',
      json_schema: { name: 'person', schema, strict: true },
    });
  });

  it('works with the Vercel AI SDK (generateText, streamText with a tool round trip)', async () => {
    const provider = createOpenAICompatible({
      name: 'aisuite',
      baseURL: `${ts.url}/api/v1/openai`,
      apiKey: ws.apiKey,
      includeUsage: true,
    });
    ts.fake.script({ text: 'Hi from the SDK', usage: { prompt_tokens: 4, completion_tokens: 4 } });
    const g = await generateText({ model: provider('fake-chat'), prompt: 'hello' });
    expect(g.text).toBe('Hi from the SDK');
    expect(g.usage.inputTokens).toBe(4);

    ts.fake.script(
      { toolCalls: [{ id: 'call_v', name: 'add', arguments: '{"a":2,"b":3}' }] },
      { text: ['The sum ', 'is 5.'] },
    );
    const { tool, jsonSchema, stepCountIs } = await import('ai');
    const s = streamText({
      model: provider('fake-chat'),
      prompt: 'add 2 and 3',
      tools: {
        add: tool({
          description: 'adds',
          inputSchema: jsonSchema<{ a: number; b: number }>({
            type: 'object',
            properties: { a: { type: 'number' }, b: { type: 'number' } },
            required: ['a', 'b'],
          }),
          execute: async ({ a, b }) => ({ sum: a + b }),
        }),
      },
      stopWhen: stepCountIs(3),
    });
    expect(await s.text).toBe('The sum is 5.');
    expect(ts.fake.requests[2]?.body.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'call_v' });
  });
});

describe('errors in OpenAI’s shape, costing nothing', () => {
  const expectError = async (res: Response, status: number, shape: Record<string, unknown>) => {
    expect(res.status).toBe(status);
    const body = (await res.json()) as { error: Record<string, unknown> };
    expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
    expect(body.error).toMatchObject(shape);
    return res.headers.get('x-request-id') as string;
  };
  const noUsage = async (requestId: string) => {
    await new Promise((r) => setTimeout(r, 100));
    expect(await sql('select 1 from usage_records where request_id = ?', [requestId])).toHaveLength(0);
  };

  it('401 invalid_api_key for a wrong key (AuthenticationError), a widget token or a console session', async () => {
    const bad = new OpenAI({ baseURL: `${ts.url}/api/v1/openai`, apiKey: 'svc_ai_nope', maxRetries: 0 });
    const err = await bad.chat.completions
      .create({ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('invalid_api_key');
    const wt = await ts.api('/widget-tokens', { method: 'POST', key: ws.apiKey, json: {} });
    const widgetToken = ((await wt.json()) as { token: string }).token;
    await expectError(
      await post({ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }] }, widgetToken),
      401,
      {
        code: 'invalid_api_key',
      },
    );
    const session = await createTestSession(ts, ws);
    await expectError(await post({ model: 'fake-chat', messages: [] }, session.token), 401, {
      code: 'invalid_api_key',
    });
    const consoleRes = await fetch(`${ts.url}/console-api/v1/openai/chat/completions`, {
      method: 'POST',
      headers: { cookie: session.cookie, origin: ts.url, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }] }),
    });
    await expectError(consoleRes, 401, { code: 'invalid_api_key' });
    await expectError(await ts.api('/openai/models', { key: session.token }), 401, {
      code: 'invalid_api_key',
    });
    expect(ts.fake.requests).toHaveLength(0);
  });

  it('404 model_not_found for an unknown model (NotFoundError)', async () => {
    const err = await client.chat.completions
      .create({ model: 'gpt-nope', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err).toMatchObject({ code: 'model_not_found', param: 'model', status: 404 });
    const id = await expectError(
      await post({ model: 'fake-embed', messages: [{ role: 'user', content: 'x' }] }),
      404,
      {
        code: 'model_not_found',
      },
    );
    await noUsage(id);
  });

  it('400 invalid_request_error naming the param: n > 1, unknown and unsupported params, wrong types, malformed JSON', async () => {
    const cases: [unknown, string][] = [
      [{ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], n: 2 }, 'n'],
      [{ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], logprobs: true }, 'logprobs'],
      [{ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], audio: { voice: 'x' } }, 'audio'],
      [{ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], frobnicate: 1 }, 'frobnicate'],
      [{ model: 'fake-chat', messages: 'hello' }, 'messages'],
      [{ model: 'fake-chat', messages: [] }, 'messages'],
      [{ model: 42, messages: [{ role: 'user', content: 'x' }] }, 'model'],
      [{ messages: [{ role: 'user', content: 'x' }] }, 'model'],
      [{ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }, 'temperature'],
      [{ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], temperature: 3 }, 'temperature'],
      [{ model: 'fake-chat', messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role'],
      [
        {
          model: 'fake-chat',
          messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }],
        },
        'messages[0].content[0]',
      ],
      [{ model: 'fake-chat', messages: [{ role: 'tool', content: 'x' }] }, 'messages[0].tool_call_id'],
      [
        { model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function' }] },
        'tools[0]',
      ],
      [
        { model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], response_format: { type: 'xml' } },
        'response_format.type',
      ],
      [
        {
          model: 'fake-chat',
          messages: [{ role: 'user', content: 'x' }],
          stream_options: { include_usage: true },
        },
        'stream_options',
      ],
      [{ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], stop: [1] }, 'stop'],
      [{ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }, 'max_tokens'],
    ];
    for (const [body, param] of cases) {
      const id = await expectError(await post(body), 400, { type: 'invalid_request_error', param });
      await noUsage(id);
    }
    const sdkErr = await client.chat.completions
      .create({ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }], n: 3 })
      .catch((e: unknown) => e);
    expect(sdkErr).toBeInstanceOf(OpenAI.BadRequestError);
    expect(sdkErr).toMatchObject({ param: 'n', type: 'invalid_request_error' });

    const malformed = await ts.api('/openai/chat/completions', {
      method: 'POST',
      key: ws.apiKey,
      headers: { 'content-type': 'application/json' },
      body: '{"model": "fake-chat", "messages": [',
    });
    await expectError(malformed, 400, { type: 'invalid_request_error', code: 'invalid_json' });
    expect(ts.fake.requests).toHaveLength(0);
  });

  it('413 for a body over the limit', async () => {
    const res = await post({
      model: 'fake-chat',
      messages: [{ role: 'user', content: 'x'.repeat(5 * 1024 * 1024) }],
    });
    await expectError(res, 413, { code: 'request_too_large' });
    expect(ts.fake.requests).toHaveLength(0);
  });

  it('429 rate_limit_exceeded with Retry-After and x-ratelimit-* (RateLimitError) from the chat bucket', async () => {
    const limited = await startTestServerWithFakeModel({ env: { RATE_LIMIT_CHAT: '2' } });
    try {
      const w = await createTestWorkspace(limited);
      const c = new OpenAI({ baseURL: `${limited.url}/api/v1/openai`, apiKey: w.apiKey, maxRetries: 0 });
      // The native route and this surface share the workspace's `chat` bucket.
      const native = await limited.api('/chat', {
        method: 'POST',
        key: w.apiKey,
        json: { messages: [{ role: 'user', content: 'x' }] },
      });
      expect(native.status).toBe(200);
      await native.text();
      await c.chat.completions.create({ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }] });
      const err = await c.chat.completions
        .create({ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }] })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.RateLimitError);
      const e = err as InstanceType<typeof OpenAI.RateLimitError>;
      expect(e.code).toBe('rate_limit_exceeded');
      expect(Number(e.headers?.get('retry-after'))).toBeGreaterThan(0);
      expect(e.headers?.get('x-ratelimit-limit-requests')).toBe('2');
      expect(e.headers?.get('x-ratelimit-remaining-requests')).toBe('0');
      expect(e.headers?.get('x-ratelimit-reset-requests')).toMatch(/^\d+s$/);
    } finally {
      await limited.close();
    }
  });

  // PostgreSQL only: a row lock held by another connection makes the admission statement wait
  // (PGlite runs every connection in one session, where nothing waits for a lock).
  it.skipIf(!process.env.DATABASE_URL)(
    "streams a recently admitted key's reply started while its admission ran: text and tool call fragments in order, nothing before it passed",
    async () => {
      const w = await createTestWorkspace(ts);
      const c = new OpenAI({ baseURL: `${ts.url}/api/v1/openai`, apiKey: w.apiKey, maxRetries: 0 });
      await c.chat.completions.create({ model: 'fake-chat', messages: [{ role: 'user', content: 'warm' }] });
      ts.fake.reset();
      ts.fake.script({
        text: ['Let me ', 'look.'],
        toolCalls: [{ id: 'call_early', name: 'lookup', arguments: '{"q":"early"}' }],
        usage: { prompt_tokens: 4, completion_tokens: 6 },
      });
      const lock = await lockChatRateLimitRow(ts, w.workspaceId);
      try {
        let answered = false;
        const pending = c.chat.completions
          .create({
            model: 'fake-chat',
            messages: [{ role: 'user', content: 'x' }],
            tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }],
            stream: true,
            stream_options: { include_usage: true },
          })
          .then((stream) => {
            answered = true;
            return stream;
          });
        await ts.fake.waitForRequests(1);
        await expect.poll(() => ts.fake.requests[0]?.completed).toBe(true);
        expect(answered).toBe(false);
        await lock.release();
        const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
        for await (const chunk of await pending) chunks.push(chunk);
        expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
        expect(chunks.map((x) => x.choices[0]?.delta.content ?? '').join('')).toBe('Let me look.');
        const calls = chunks.flatMap((x) => x.choices[0]?.delta.tool_calls ?? []);
        expect(calls[0]).toMatchObject({ id: 'call_early', function: { name: 'lookup' } });
        expect(calls.map((t) => t.function?.arguments ?? '').join('')).toBe('{"q":"early"}');
        expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('tool_calls');
        expect(chunks.at(-1)?.usage).toEqual({ prompt_tokens: 4, completion_tokens: 6, total_tokens: 10 });
      } finally {
        await lock.release();
      }
    },
  );

  it('429 insufficient_quota once the monthly token quota is spent', async () => {
    const w = await createTestWorkspace(ts, { monthlyTokenQuota: 30 });
    const c = new OpenAI({ baseURL: `${ts.url}/api/v1/openai`, apiKey: w.apiKey, maxRetries: 0 });
    ts.fake.script({ text: 'ok', usage: { prompt_tokens: 20, completion_tokens: 10 } });
    const { response } = await c.chat.completions
      .create({ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }] })
      .withResponse();
    await usageFor(response.headers.get('x-request-id') as string);
    const err = await c.chat.completions
      .create({ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect(err).toMatchObject({ status: 429, code: 'insufficient_quota', type: 'insufficient_quota' });
    expect(ts.fake.requests).toHaveLength(1);
  });

  it('an upstream failure before the first byte is a 5xx (InternalServerError); after it, an error event and no [DONE]', async () => {
    ts.fake.script({ error: { status: 500, message: 'upstream exploded' } });
    const err = await client.chat.completions
      .create({ model: 'fake-chat', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(502);

    ts.fake.script({ text: ['part one ', 'part two ', 'never'], failAfterChunks: 2 });
    const stream = await client.chat.completions.create({
      model: 'fake-chat',
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
    });
    let got = '';
    const failed = await (async () => {
      for await (const c of stream) got += c.choices[0]?.delta.content ?? '';
    })().catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(OpenAI.APIError);
    expect(got).toBe('part one part two ');
  });

  it('stops the upstream and the bill when the client disconnects', async () => {
    ts.fake.script({ text: 'z'.repeat(2000), chunkSize: 4, paceMs: 5, usage: false });
    const url = new URL(`${ts.url}/api/v1/openai/chat/completions`);
    const requestId = await new Promise<string>((resolve, reject) => {
      const req = http.request(
        url,
        {
          method: 'POST',
          headers: { authorization: `Bearer ${ws.apiKey}`, 'content-type': 'application/json' },
        },
        (res) => {
          let chars = 0;
          res.on('data', (c: Buffer) => {
            chars += c.length;
            if (chars >= 1000) {
              req.destroy();
              resolve(String(res.headers['x-request-id']));
            }
          });
        },
      );
      req.on('error', () => {});
      req.end(
        JSON.stringify({
          model: 'fake-chat',
          messages: [{ role: 'user', content: 'long please' }],
          stream: true,
        }),
      );
      setTimeout(() => reject(new Error('no data')), 10_000).unref();
    });
    await expect.poll(() => ts.fake.requests[0]?.aborted).toBe(true);
    expect(ts.fake.requests[0]?.completed).toBe(false);
    const row = await usageFor(requestId);
    expect(row.provider_status).toBe('aborted');
    expect(Number(row.output_tokens)).toBeGreaterThan(0);
    expect(Number(row.output_tokens)).toBeLessThan(500);
  });
});
