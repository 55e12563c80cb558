import http from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  fakeOpenAIEnv,
  lockChatRateLimitRow,
  startTestServer,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

let ts: Awaited<ReturnType<typeof startTestServerWithFakeModel>>;
let ws: TestWorkspace;
beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RATE_LIMIT_CHAT: '1000' } });
  ws = await createTestWorkspace(ts);
});
afterAll(() => ts?.close());
beforeEach(() => ts.fake.reset());

const sql = <T>(q: string, params: unknown[] = []) => ts.server.deps.em().execute<T[]>(q, params);
const chat = (json: unknown, key = ws.apiKey, server: TestServer = ts) =>
  server.api('/chat', { method: 'POST', key, json });

interface UsageRow {
  workspace_id: string;
  api_key_id: string | null;
  endpoint: string;
  model: string;
  meter: string;
  input_tokens: string;
  output_tokens: string;
  cost_micros: string;
  provider_status: string;
  request_id: string;
  latency_ms: number;
  component_lines: { component: string; quantity: number; costMicros: number }[];
}

const usageFor = async (requestId: string) => {
  await expect
    .poll(async () => (await sql('select 1 from usage_records where request_id = ?', [requestId])).length)
    .toBe(1);
  const [row] = await sql<UsageRow>('select * from usage_records where request_id = ?', [requestId]);
  return row as UsageRow;
};

describe('POST /chat streaming', () => {
  it('streams plain text chunks whose concatenation is the reply, and records usage', async () => {
    ts.fake.script({
      text: ['Hello', ', ', 'world', '!'],
      usage: { prompt_tokens: 12, completion_tokens: 4 },
    });
    const res = await chat({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Say hello' },
      ],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(res.headers.get('cache-control')).toBe('no-cache');
    expect(res.headers.get('connection')).toBe('keep-alive');
    expect(res.headers.get('ratelimit-limit')).toBe('1000');
    // The fast path sends what helmet sets on every /api/v1 response, and a request id.
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
    const text = await res.text();
    expect(text).toBe('Hello, world!');
    expect(ts.fake.requests[0]?.body).toMatchObject({
      model: 'fake-chat',
      stream: true,
      stream_options: { include_usage: true },
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Say hello' },
      ],
    });
    const requestId = res.headers.get('x-request-id') as string;
    const row = await usageFor(requestId);
    expect(row).toMatchObject({
      workspace_id: ws.workspaceId,
      api_key_id: ws.keyId,
      endpoint: '/chat',
      model: 'fake-chat',
      meter: 'tokens',
      provider_status: 'success',
    });
    // $1 / $2 per million tokens: 12 × 1 + 4 × 2 micro-dollars.
    expect([row.input_tokens, row.output_tokens, row.cost_micros].map(Number)).toEqual([12, 4, 20]);
    expect(row.component_lines.map((l) => [l.component, l.quantity, l.costMicros])).toEqual([
      ['input_tokens', 12, 12],
      ['output_tokens', 4, 8],
    ]);
  });

  it('accepts the default model id explicitly and estimates ~4 chars/token without usage', async () => {
    ts.fake.script({ text: 'a'.repeat(40), usage: false });
    const content = 'b'.repeat(20);
    const res = await chat({ model: 'fake-chat', messages: [{ role: 'user', content }] });
    expect(await res.text()).toBe('a'.repeat(40));
    const row = await usageFor(res.headers.get('x-request-id') as string);
    expect([row.input_tokens, row.output_tokens, row.cost_micros].map(Number)).toEqual([5, 10, 25]);
  });

  it('updates the per-key usage totals', async () => {
    const w = await createTestWorkspace(ts);
    ts.fake.script(
      { text: 'one', usage: { prompt_tokens: 3, completion_tokens: 1 } },
      { text: 'two', usage: { prompt_tokens: 5, completion_tokens: 2 } },
    );
    for (let i = 0; i < 2; i++)
      await (await chat({ messages: [{ role: 'user', content: 'x' }] }, w.apiKey)).text();
    await expect
      .poll(async () => {
        const [k] = await sql<Record<string, string>>('select * from api_keys where id = ?', [w.keyId]);
        return [k?.request_count, k?.input_tokens, k?.output_tokens, k?.cost_micros].map(Number);
      })
      .toEqual([2, 8, 3, 14]);
  });

  /** The body of a streamed `/chat` answer as the reads that brought it. */
  const reads = (server: TestServer, json: unknown): Promise<string[]> =>
    new Promise((resolve, reject) => {
      const req = http.request(`${server.url}/api/v1/chat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ws.apiKey}` },
      });
      req.on('response', (res) => {
        const got: string[] = [];
        res.setEncoding('utf8');
        res.on('data', (t: string) => got.push(t));
        res.on('end', () => resolve(got));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(JSON.stringify(json));
    });

  it('merges a reply over CHAT_STREAM_COALESCE_MS: the first token at once, the rest with the end; 0 writes each read', async () => {
    const tokens = Array.from({ length: 12 }, (_, i) => `t${i} `);
    const body = { messages: [{ role: 'user', content: 'Count' }] };
    // A window far longer than the reply (12 chunks 5 ms apart): however late the fake's timers
    // fire on a busy machine, the first token goes alone and the rest leaves with the end.
    const windowed = await startTestServer({
      db: ts.db,
      env: { ...fakeOpenAIEnv(ts.fake), RATE_LIMIT_CHAT: '1000', CHAT_STREAM_COALESCE_MS: '1000' },
    });
    // 0: one write per network read from the model (chunks 15 ms apart arrive one by one).
    const plain = await startTestServer({
      db: ts.db,
      env: { ...fakeOpenAIEnv(ts.fake), RATE_LIMIT_CHAT: '1000', CHAT_STREAM_COALESCE_MS: '0' },
    });
    try {
      ts.fake.script({ text: tokens, paceMs: 5 });
      const got = await reads(windowed, body);
      expect(got.join('')).toBe(tokens.join(''));
      expect(got[0]).toBe('t0 ');
      expect(got.length).toBeLessThanOrEqual(3);

      ts.fake.script({ text: tokens, paceMs: 15 });
      const each = await reads(plain, body);
      expect(each.join('')).toBe(tokens.join(''));
      // A busy reader may find two writes in one read now and then.
      expect(each.length).toBeGreaterThanOrEqual(8);
    } finally {
      await windowed.close();
      await plain.close();
    }
  });

  it("refreshes the key's last_used_at in the admission statement, at most once a minute", async () => {
    const w = await createTestWorkspace(ts);
    const lastUsed = async () => {
      const t = (
        await sql<{ t: string | null }>('select last_used_at as t from api_keys where id = ?', [w.keyId])
      )[0]?.t;
      return t ? new Date(t) : null;
    };
    expect(await lastUsed()).toBeNull();
    await (await chat({ messages: [{ role: 'user', content: 'x' }] }, w.apiKey)).text();
    const first = await lastUsed();
    expect(first).toBeInstanceOf(Date);
    await (await chat({ messages: [{ role: 'user', content: 'x' }] }, w.apiKey)).text();
    expect(await lastUsed()).toEqual(first);
    // The refresh skips a key row locked by a usage write in flight (it never waits): let the
    // usage of the two requests land first.
    await expect
      .poll(async () => (await sql('select 1 from usage_records where api_key_id = ?', [w.keyId])).length)
      .toBe(2);
    await sql("update api_keys set last_used_at = now() - interval '2 minutes' where id = ?", [w.keyId]);
    await (await chat({ messages: [{ role: 'user', content: 'x' }] }, w.apiKey)).text();
    expect((await lastUsed())?.getTime()).toBeGreaterThan(Date.now() - 60_000);
  });
});

describe('POST /chat validation (spec 4.1, 7)', () => {
  const cases: [string, unknown, string][] = [
    ['no messages', {}, 'Messages array is required'],
    ['empty messages', { messages: [] }, 'Messages array is required'],
    ['messages not an array', { messages: 'hi' }, 'Messages array is required'],
    [
      'last message without content',
      { messages: [{ role: 'user' }] },
      'Last message must have valid content',
    ],
    [
      'last message with empty content',
      { messages: [{ role: 'user', content: '' }] },
      'Last message must have valid content',
    ],
    [
      'last message with null content',
      { messages: [{ role: 'user', content: null }] },
      'Last message must have valid content',
    ],
    [
      'role outside the three values',
      { messages: [{ role: 'tool', content: 'hi' }] },
      'Invalid request body',
    ],
    [
      'earlier message without content',
      { messages: [{ role: 'user' }, { role: 'user', content: 'hi' }] },
      'Invalid request body',
    ],
    ['model not a string', { messages: [{ role: 'user', content: 'hi' }], model: 3 }, 'Invalid request body'],
    ['unknown model', { messages: [{ role: 'user', content: 'hi' }], model: 'gpt-nope' }, 'Invalid model'],
  ];
  for (const [name, body, message] of cases) {
    it(`400 ${message}: ${name}`, async () => {
      const res = await chat(body);
      expect(res.status).toBe(400);
      const answer = await res.json();
      expect(answer.error).toBe(message);
      if (message === 'Invalid model') {
        // The ids a caller may pass instead, as GET /models lists them.
        expect(answer).toEqual({
          error: 'Invalid model',
          code: 'INVALID_MODEL',
          details: { model: 'gpt-nope', kind: 'chat', validModels: ['fake-chat'] },
        });
      } else expect(answer).toEqual({ error: message });
    });
  }

  it('400 Invalid request body for malformed JSON and for a non-JSON content type', async () => {
    const bad = await ts.api('/chat', {
      method: 'POST',
      key: ws.apiKey,
      headers: { 'content-type': 'application/json' },
      body: '{"messages": [',
    });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ error: 'Invalid request body' });
    const form = await ts.api('/chat', {
      method: 'POST',
      key: ws.apiKey,
      headers: { 'content-type': 'text/plain' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(form.status).toBe(400);
    expect(await form.json()).toEqual({ error: 'Invalid request body' });
  });

  it('401 Invalid API key without a valid key, before looking at the body', async () => {
    const res = await chat({ messages: [] }, 'svc_ai_nope');
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Invalid API key' });
    expect(ts.fake.requests).toHaveLength(0);
  });

  it('413 for an oversized body, without calling the model', async () => {
    const res = await chat({ messages: [{ role: 'user', content: 'x'.repeat(1_100_000) }] });
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: 'Request body too large' });
    expect(ts.fake.requests).toHaveLength(0);
  });

  it('serves the same handler through express for other spellings of the path (not the fast path)', async () => {
    ts.fake.script({ text: 'via express' });
    const res = await ts.api('/chat/', {
      method: 'POST',
      key: ws.apiKey,
      json: { messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(await res.text()).toBe('via express');
    const bad = await ts.api('/chat/', { method: 'POST', key: 'svc_ai_nope', json: {} });
    expect(bad.status).toBe(401);
    expect(await bad.json()).toEqual({ error: 'Invalid API key' });
  });
});

describe('POST /chat upstream failures', () => {
  it('502 AI model error: <details> when the upstream fails before the first byte', async () => {
    ts.fake.script({ error: { status: 400, message: 'This model does not exist' } });
    const res = await chat({ messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(502);
    expect((await res.json()).error).toBe('AI model error: This model does not exist');
    const row = await usageFor(res.headers.get('x-request-id') as string);
    expect(row.provider_status).toBe('error');
    expect(Number(row.output_tokens)).toBe(0);
  });

  it('502 AI service is temporarily unavailable when the upstream times out', async () => {
    const slow = await startTestServerWithFakeModel({ env: { LLM_TIMEOUT_MS: '300' } });
    try {
      const w = await createTestWorkspace(slow);
      slow.fake.script({ hang: true });
      const res = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey, slow);
      expect(res.status).toBe(502);
      expect((await res.json()).error).toBe('AI service is temporarily unavailable');
    } finally {
      await slow.close();
    }
  });

  it('aborts the response when the upstream breaks after the first byte (no complete-looking reply)', async () => {
    ts.fake.script({ text: ['part one ', 'part two ', 'never'], failAfterChunks: 2 });
    const res = await chat({ messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow();
    const row = await usageFor(res.headers.get('x-request-id') as string);
    expect(row.provider_status).toBe('error');
    expect(Number(row.output_tokens)).toBe(5); // 18 characters streamed ≈ 5 tokens
  });

  it('aborts the upstream when the client disconnects, and still records the usage so far', async () => {
    ts.fake.script({ text: 'z'.repeat(2000), chunkSize: 4, paceMs: 5, usage: false });
    const url = new URL(`${ts.url}/api/v1/chat`);
    const received = await new Promise<{ requestId: string; chars: number }>((resolve, reject) => {
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
            if (chars >= 40) {
              req.destroy();
              resolve({ requestId: String(res.headers['x-request-id']), chars });
            }
          });
        },
      );
      req.on('error', () => {});
      req.end(JSON.stringify({ messages: [{ role: 'user', content: 'long please' }] }));
      setTimeout(() => reject(new Error('no data')), 10_000).unref();
    });
    await expect.poll(() => ts.fake.requests[0]?.aborted).toBe(true);
    expect(ts.fake.requests[0]?.completed).toBe(false);
    const row = await usageFor(received.requestId);
    expect(row.provider_status).toBe('aborted');
    expect(Number(row.output_tokens)).toBeGreaterThanOrEqual(10);
    expect(Number(row.output_tokens)).toBeLessThan(500);
    expect(Number(row.input_tokens)).toBe(3);
  });
});

describe('POST /chat metering', () => {
  it('403 Token limit exceeded once the monthly quota is spent; input + output tokens count', async () => {
    const w = await createTestWorkspace(ts, { monthlyTokenQuota: 30 });
    ts.fake.script({ text: 'ok', usage: { prompt_tokens: 20, completion_tokens: 10 } });
    const first = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey);
    expect(await first.text()).toBe('ok');
    await usageFor(first.headers.get('x-request-id') as string);
    const res = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey);
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({ error: 'Token limit exceeded' });
    expect(ts.fake.requests).toHaveLength(1);
    // Reset at the billing-cycle date.
    await sql(
      "update workspaces set billing_cycle_anchor = now() - interval '1 month' - interval '1 minute' where id = ?",
      [w.workspaceId],
    );
    const again = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey);
    expect(again.status).toBe(200);
    await again.text();
  });

  it('429 Rate limit exceeded with Retry-After and RateLimit headers, shared by two server processes', async () => {
    // A window far longer than the test, so no window boundary falls between its requests.
    const env = { RATE_LIMIT_CHAT: '2', RATE_LIMIT_WINDOW_SECONDS: '100000000' };
    const a = await startTestServerWithFakeModel({ env });
    const b = await startTestServer({ db: a.db, env: { ...fakeOpenAIEnv(a.fake), ...env } });
    try {
      const w = await createTestWorkspace(a);
      const ok1 = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey, a);
      expect(ok1.headers.get('ratelimit-remaining')).toBe('1');
      await ok1.text();
      const ok2 = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey, b);
      expect(ok2.status).toBe(200);
      expect(ok2.headers.get('ratelimit-remaining')).toBe('0');
      await ok2.text();
      const limited = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey, a);
      expect(limited.status).toBe(429);
      expect(await limited.json()).toEqual({ error: 'Rate limit exceeded', code: 'RATE_LIMITED' });
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(limited.headers.get('ratelimit-limit')).toBe('2');
      expect(limited.headers.get('ratelimit-remaining')).toBe('0');
      expect(limited.headers.get('ratelimit-reset')).toMatch(/^\d+$/);
      // `a` admitted the key with a unit left, so it may have started this request's model call
      // before its admission said 429 (`EarlyCall`): at most that one call, nothing of it sent
      // to the client (above) nor recorded.
      expect(a.fake.requests.length).toBeLessThanOrEqual(3);
      const records = async () =>
        Number(
          (
            await a.server.deps
              .em()
              .execute<{ n: string }[]>('select count(*) as n from usage_records where workspace_id = ?', [
                w.workspaceId,
              ])
          )[0]?.n,
        );
      await expect.poll(records).toBe(2);
      // Forgotten on the refusal: the next request of the key on `a` calls nothing upstream.
      const n = a.fake.requests.length;
      expect((await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey, a)).status).toBe(429);
      expect(a.fake.requests).toHaveLength(n);
      expect(await records()).toBe(2);
    } finally {
      await b.close();
      await a.close();
    }
  });

  it('a key revoked after its admissions passed: 401 and nothing else; a model call started early is aborted, nothing recorded', async () => {
    const w = await createTestWorkspace(ts);
    const first = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey);
    expect(first.status).toBe(200);
    await first.text();
    await sql('update api_keys set revoked_at = now() where id = ?', [w.keyId]);
    const res = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey);
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Invalid API key' });
    // At most the one early call, nothing of it sent to the client (above) nor recorded.
    expect(ts.fake.requests.length).toBeLessThanOrEqual(2);
    await usageFor(first.headers.get('x-request-id') as string);
    const [count] = await sql<{ n: string }>(
      'select count(*) as n from usage_records where workspace_id = ?',
      [w.workspaceId],
    );
    expect(Number(count?.n)).toBe(1);
    // Forgotten on the refusal: the next request of the key calls nothing upstream.
    const n = ts.fake.requests.length;
    expect((await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey)).status).toBe(401);
    expect(ts.fake.requests).toHaveLength(n);
  });

  // PostgreSQL only: a row lock held by another connection makes the admission statement wait
  // (PGlite runs every connection in one session, where nothing waits for a lock).
  it.skipIf(!process.env.DATABASE_URL)(
    "starts a recently admitted key's model call while its admission statement runs; nothing reaches the client before it passes",
    async () => {
      const w = await createTestWorkspace(ts);
      const warm = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey);
      await warm.text();
      ts.fake.reset();
      ts.fake.script({ text: ['early', ' bird'], usage: { prompt_tokens: 3, completion_tokens: 2 } });
      const lock = await lockChatRateLimitRow(ts, w.workspaceId);
      try {
        let answered = false;
        const pending = chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey).then((r) => {
          answered = true;
          return r;
        });
        // The model is called while the admission waits for the lock; the client has nothing yet.
        await ts.fake.waitForRequests(1);
        await expect.poll(() => ts.fake.requests[0]?.completed).toBe(true);
        expect(answered).toBe(false);
        await lock.release();
        const res = await pending;
        expect(res.status).toBe(200);
        expect(res.headers.get('ratelimit-remaining')).toBe('998');
        expect(await res.text()).toBe('early bird');
        const row = await usageFor(res.headers.get('x-request-id') as string);
        expect([row.input_tokens, row.output_tokens, row.provider_status]).toEqual(['3', '2', 'success']);
      } finally {
        await lock.release();
      }
    },
  );

  it('503 No AI model configured without a model, while the rest of the service works', async () => {
    const bare = await startTestServer();
    try {
      const w = await createTestWorkspace(bare);
      const res = await chat({ messages: [{ role: 'user', content: 'hi' }] }, w.apiKey, bare);
      expect(res.status).toBe(503);
      expect(await res.json()).toEqual({ error: 'No AI model configured' });
      expect((await bare.api('/me', { key: w.apiKey })).status).toBe(200);
    } finally {
      await bare.close();
    }
  });
});
