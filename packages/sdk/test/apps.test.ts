import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AiSuite,
  AppChatStreamError,
  AuthenticationError,
  BadRequestError,
  InsufficientCreditsError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
} from '../src/index.js';

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let client: AiSuite;
let appId: string;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey });
  appId = (await client.apps.create({ name: 'SDK tutor', systemPrompt: 'Be brief.' })).app.id;
});
afterAll(() => ts?.close());

describe('client.apps management', () => {
  it('creates, lists, gets, updates and deletes', async () => {
    const { app } = await client.apps.create({ name: 'Temp', controls: { temperature: 0.5 } });
    expect(app).toMatchObject({ name: 'Temp', appType: 'app', controls: { temperature: 0.5 } });
    expect((await client.apps.list()).data.map((a) => a.id)).toContain(app.id);
    expect((await client.apps.get(app.id)).app.name).toBe('Temp');
    // The one rule: the body as the API answers it, and the raw response beside it on request.
    const { data, response } = await client.apps.get(app.id).withResponse();
    expect(data).toEqual(
      await (
        await fetch(`${ts.url}/api/v1/apps/${app.id}`, { headers: { authorization: `Bearer ${ws.apiKey}` } })
      ).json(),
    );
    expect(response.headers.get('x-request-id')).toMatch(/^req_/);
    expect((await client.apps.update(app.id, { name: 'Renamed' })).app.name).toBe('Renamed');
    expect(await client.apps.delete(app.id)).toEqual({ deleted: true, id: app.id });
    const err = await client.apps.get(app.id).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthenticationError);
    expect((err as AuthenticationError).message).toBe('Unauthorized or app not found');
    await expect(client.apps.create({ name: '' })).rejects.toThrow(BadRequestError);
  });
});

describe('client.apps chat', () => {
  it('chat() returns the reply and its metadata', async () => {
    ts.fake.script({ text: 'Forty-two.', usage: { prompt_tokens: 100, completion_tokens: 3 } });
    const r = await client.apps.chat(appId, { message: 'Answer?', role: 'student' });
    expect(r).toMatchObject({
      content: 'Forty-two.',
      role: 'assistant',
      metadata: { model: 'fake-chat', tokensUsed: { input: 100, output: 3, total: 103 } },
    });
    expect(r.contextWindow.utilization).toBeCloseTo(100 / 128_000);
    const err = await client.apps
      .chat(appId, { message: 'x'.repeat(2001), role: 'student' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BadRequestError);
    expect((err as BadRequestError).message).toBe('message must be 2000 characters or less');
  });

  it('chatStream() yields tokens, then finalText() and done', async () => {
    ts.fake.script({ text: 'Streaming works fine.', chunkSize: 4 });
    const stream = await client.apps.chatStream(appId, {
      message: 'Stream please',
      role: 'student',
      externalIdentity: { anonymousVisitorId: 'v-1' },
    });
    const tokens: string[] = [];
    for await (const t of stream) tokens.push(t);
    expect(tokens.join('')).toBe('Streaming works fine.');
    // The first chunk at once, the rest merged over the server's window.
    expect(tokens.length).toBeGreaterThanOrEqual(2);
    expect(await stream.finalText()).toBe('Streaming works fine.');
    const done = await stream.done;
    expect(done).toMatchObject({ type: 'done', turnId: expect.stringMatching(/^turn_/) });
    expect(done.metadata.tokensUsed.total).toBe(
      done.metadata.tokensUsed.input + done.metadata.tokensUsed.output,
    );
    const { data: thread } = await client.apps.threads.get(appId, done.threadId);
    expect(thread.metadata).toEqual({ anonymous_visitor_id: 'v-1' });

    // finalText without iterating consumes the stream by itself
    ts.fake.script({ text: 'Second.' });
    const s2 = await client.apps.chatStream(appId, {
      message: 'Again',
      role: 'student',
      threadId: done.threadId,
    });
    expect(await s2.finalText()).toBe('Second.');
    expect((await s2.done).threadId).toBe(done.threadId);
  });

  it('a failure mid-stream throws AppChatStreamError and the user message is kept', async () => {
    const { data: thread } = await client.apps.threads.create(appId, { title: 'Fragile' });
    ts.fake.script({ text: 'one two three four five', chunkSize: 4, failAfterChunks: 2 });
    const stream = await client.apps.chatStream(appId, {
      message: 'Keep me',
      role: 'student',
      threadId: thread.id,
    });
    const seen: string[] = [];
    const err = await (async () => {
      for await (const t of stream) seen.push(t);
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppChatStreamError);
    expect((err as AppChatStreamError).code).toBe('MODEL_ERROR');
    expect(seen).toEqual(['one ', 'two ']);
    await expect(stream.finalText()).rejects.toBeInstanceOf(AppChatStreamError);
    const { data } = await client.apps.threads.messages(appId, thread.id);
    expect(data.map((m) => [m.role, m.content, m.provider_status])).toEqual([['user', 'Keep me', 'error']]);
  });

  it('402 before the stream starts is InsufficientCreditsError', async () => {
    const poor = await createTestWorkspace(ts);
    const pc = new AiSuite({ baseURL: ts.url, apiKey: poor.apiKey });
    const { app } = await pc.apps.create({ name: 'Poor' });
    const err = await pc.apps.chatStream(app.id, { message: 'hi', role: 'student' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InsufficientCreditsError);
    expect((err as InsufficientCreditsError).message).toBe('Insufficient credits');
  });
});

describe('client.apps memory', () => {
  it('threads.*, saveMessages and memoryStatus', async () => {
    const { app } = await client.apps.create({ name: 'Memory' });
    const { data: t } = await client.apps.threads.create(app.id);
    expect(t).toMatchObject({ title: 'New Thread', status: 'active', metadata: {} });
    expect(
      await client.apps.saveMessages(app.id, {
        threadId: t.id,
        messages: [
          { role: 'user', content: 'q' },
          { role: 'assistant', content: 'a' },
        ],
      }),
    ).toEqual({ saved: 2, threadId: t.id });
    const page = await client.apps.threads.messages(app.id, t.id, { limit: 1, offset: 1 });
    expect(page.meta).toEqual({ limit: 1, offset: 1, total: 2 });
    expect(page.data[0]?.sequence_number).toBe(2);
    expect((await client.apps.threads.update(app.id, t.id, { status: 'closed' })).data.status).toBe('closed');
    const bad = await client.apps.threads
      .update(app.id, t.id, { status: 'nope' as 'closed' })
      .catch((e: unknown) => e);
    expect((bad as BadRequestError).message).toBe('Invalid status. Must be one of: active, archived, closed');
    expect(await client.apps.threads.delete(app.id, t.id)).toEqual({ success: true, threadId: t.id });
    const list = await client.apps.threads.list(app.id, { status: 'archived' });
    expect(list.data.map((x) => x.id)).toEqual([t.id]);
    expect(await client.apps.memoryStatus(app.id)).toEqual({
      appId: app.id,
      threadCount: 1,
      activeThreadCount: 0,
      messageCount: 2,
    });
    await expect(client.apps.threads.get(app.id, '00000000-0000-4000-8000-000000000000')).rejects.toThrow(
      NotFoundError,
    );
  });
});

describe('widget tokens through the SDK', () => {
  it('a widget-token client chats and reads memory, and nothing else', async () => {
    const { token, widgetToken } = await client.widgetTokens.create({ appId, maxRequests: 50 });
    const widget = new AiSuite({ baseURL: ts.url, widgetToken: token, maxRetries: 0 });
    ts.fake.script({ text: 'From the widget.' });
    const stream = await widget.apps.chatStream(appId, { message: 'hello', role: 'visitor' });
    expect(await stream.finalText()).toBe('From the widget.');
    const { threadId } = await stream.done;
    expect((await widget.apps.threads.messages(appId, threadId)).data).toHaveLength(2);
    await expect(widget.me()).rejects.toThrow(AuthenticationError);
    await expect(widget.apps.list()).rejects.toThrow(AuthenticationError);
    await expect(widget.widgetTokens.create({})).rejects.toThrow(AuthenticationError);

    await client.widgetTokens.revoke(widgetToken.id);
    const after = await widget.apps.memoryStatus(appId).catch((e: unknown) => e);
    expect(after).toBeInstanceOf(AuthenticationError);
    expect((after as AuthenticationError).code).toBe('WIDGET_TOKEN_INVALID');
  });

  it('origin and cap failures are typed errors', async () => {
    const { token } = await client.widgetTokens.create({
      appId,
      maxRequests: 1,
      allowedOrigins: ['https://a.example'],
    });
    const wrong = new AiSuite({
      baseURL: ts.url,
      widgetToken: token,
      maxRetries: 0,
      defaultHeaders: { origin: 'https://b.example' },
    });
    await expect(wrong.apps.memoryStatus(appId)).rejects.toThrow(PermissionDeniedError);
    const right = new AiSuite({
      baseURL: ts.url,
      widgetToken: token,
      maxRetries: 0,
      defaultHeaders: { origin: 'https://a.example' },
    });
    expect((await right.apps.memoryStatus(appId)).appId).toBe(appId);
    await expect(right.apps.memoryStatus(appId)).rejects.toThrow(RateLimitError);
  });
});
