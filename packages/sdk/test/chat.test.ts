import {
  createTestWorkspace,
  startTestServer,
  startTestServerWithFakeModel,
  type TestWorkspace,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  AiSuite,
  APIConnectionError,
  APIUserAbortError,
  AuthenticationError,
  BadGatewayError,
  BadRequestError,
  PermissionDeniedError,
  RateLimitError,
  ServiceUnavailableError,
} from '../src/index.js';

let ts: Awaited<ReturnType<typeof startTestServerWithFakeModel>>;
let ws: TestWorkspace;
let client: AiSuite;
beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RATE_LIMIT_CHAT: '1000' } });
  ws = await createTestWorkspace(ts);
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, maxRetries: 0 });
});
afterAll(() => ts?.close());
beforeEach(() => ts.fake.reset());

const hi = { messages: [{ role: 'user' as const, content: 'hi' }] };

describe('client.chat.stream', () => {
  it('iterates text chunks and gives the final text', async () => {
    ts.fake.script({ text: ['Hel', 'lo', ' there'], paceMs: 2 });
    const stream = client.chat.stream(hi);
    const chunks: string[] = [];
    for await (const t of stream) chunks.push(t);
    expect(chunks.join('')).toBe('Hello there');
    expect(await stream.finalText()).toBe('Hello there');
    expect((await stream.response()).headers.get('ratelimit-limit')).toBe('1000');
  });

  it('finalText() reads the whole reply without iterating; model is passed through', async () => {
    ts.fake.script({ text: 'The whole reply.' });
    const text = await client.chat.stream({ ...hi, model: 'fake-chat' }).finalText();
    expect(text).toBe('The whole reply.');
    expect(ts.fake.requests[0]?.body.model).toBe('fake-chat');
  });

  it('break aborts the request and the upstream generation', async () => {
    ts.fake.script({ text: 'y'.repeat(4000), chunkSize: 4, paceMs: 3 });
    const stream = client.chat.stream(hi);
    let got = '';
    for await (const t of stream) {
      got += t;
      if (got.length >= 20) break;
    }
    await expect.poll(() => ts.fake.requests[0]?.aborted).toBe(true);
    expect(ts.fake.requests[0]?.completed).toBe(false);
    await expect(stream.finalText()).rejects.toBeInstanceOf(APIUserAbortError);
  });

  it('aborts through the signal', async () => {
    ts.fake.script({ text: 'y'.repeat(4000), chunkSize: 4, paceMs: 3 });
    const ac = new AbortController();
    const stream = client.chat.stream(hi, { signal: ac.signal });
    const err = await (async () => {
      for await (const _ of stream) ac.abort();
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIUserAbortError);
    await expect.poll(() => ts.fake.requests[0]?.aborted).toBe(true);
  });

  it('throws a connection error when the reply is cut off mid-stream', async () => {
    ts.fake.script({ text: ['a', 'b', 'c'], failAfterChunks: 1 });
    await expect(client.chat.stream(hi).finalText()).rejects.toBeInstanceOf(APIConnectionError);
  });

  it('throws typed errors: 400, 401, 403, 429, 502, 503', async () => {
    const bad = await client.chat
      .stream({ messages: [] })
      .finalText()
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(BadRequestError);
    expect((bad as BadRequestError).message).toBe('Messages array is required');

    const unauth = new AiSuite({ baseURL: ts.url, apiKey: 'svc_ai_x', maxRetries: 0 });
    await expect(unauth.chat.stream(hi).finalText()).rejects.toBeInstanceOf(AuthenticationError);

    ts.fake.script({ error: { status: 500, message: 'upstream exploded' } });
    const gw = await client.chat
      .stream(hi)
      .finalText()
      .catch((e: unknown) => e);
    expect(gw).toBeInstanceOf(BadGatewayError);
    expect((gw as BadGatewayError).message).toBe('AI model error: upstream exploded');

    const quota = await createTestWorkspace(ts, { monthlyTokenQuota: 0 });
    const q = new AiSuite({ baseURL: ts.url, apiKey: quota.apiKey, maxRetries: 0 });
    const denied = await q.chat
      .stream(hi)
      .finalText()
      .catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(PermissionDeniedError);
    expect((denied as PermissionDeniedError).message).toBe('Token limit exceeded');

    const env = { RATE_LIMIT_CHAT: '1', RATE_LIMIT_WINDOW_SECONDS: '100000000' };
    const limited = await startTestServerWithFakeModel({ env });
    const bare = await startTestServer({ db: limited.db, env });
    try {
      const w = await createTestWorkspace(limited);
      const c = new AiSuite({ baseURL: limited.url, apiKey: w.apiKey, maxRetries: 0 });
      await c.chat.stream(hi).finalText();
      const rl = await c.chat
        .stream(hi)
        .finalText()
        .catch((e: unknown) => e);
      expect(rl).toBeInstanceOf(RateLimitError);
      expect((rl as RateLimitError).retryAfter).toBeGreaterThan(0);

      const none = new AiSuite({ baseURL: bare.url, apiKey: w.apiKey, maxRetries: 0 });
      const unavailable = await none.chat
        .stream({ messages: [{ role: 'user', content: 'x' }] })
        .finalText()
        .catch((e: unknown) => e);
      // The second process has no model configured (and shares the rate limit): 503 comes first.
      expect(unavailable).toBeInstanceOf(ServiceUnavailableError);
      expect((unavailable as ServiceUnavailableError).message).toBe('No AI model configured');
    } finally {
      await bare.close();
      await limited.close();
    }
  });
});
