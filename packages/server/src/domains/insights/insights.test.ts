import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let other: TestWorkspace;
let tutorId: string;
let coachId: string;
/** Threads made by the setup: a chat turn each (usage recorded), and one with saved messages only. */
let chatThread: string;
let anonThread: string;
let savedThread: string;

const json = async <T = any>(res: Response): Promise<T> => (await res.json()) as T;
const insights = (path = '', key = ws.apiKey, workspaceId = ws.workspaceId) =>
  ts.api(`/workspaces/${workspaceId}/insights/conversations${path}`, { key });

async function createApp(name: string): Promise<string> {
  const res = await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name } });
  return (await json(res)).app.id;
}

async function chatTurn(appId: string, body: Record<string, unknown>): Promise<string> {
  const res = await ts.api(`/apps/${appId}/chat/message`, {
    method: 'POST',
    key: ws.apiKey,
    json: { role: 'student', ...body },
  });
  expect(res.status).toBe(200);
  return (await json(res)).threadId;
}

const setUpdatedAt = (threadId: string, at: string) =>
  ts.server.deps.em().execute('update app_threads set updated_at = ? where id = ?', [at, threadId]);

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  other = await createTestWorkspace(ts, { creditsUsd: '10' });
  tutorId = await createApp('Tutor');
  coachId = await createApp('Coach');

  ts.fake.script({ text: 'Sugar from light.', usage: { prompt_tokens: 1000, completion_tokens: 10 } });
  chatThread = await chatTurn(tutorId, {
    message: 'What is photosynthesis?',
    sessionId: 'sess-1',
    externalIdentity: { externalUserId: 'pupil-1', anonymousVisitorId: 'anon-1' },
  });
  ts.fake.script({
    text: 'And at night, respiration.',
    usage: { prompt_tokens: 2000, completion_tokens: 20 },
  });
  await chatTurn(tutorId, { message: 'And at night?', threadId: chatThread });

  ts.fake.script({ text: 'Hello.', usage: { prompt_tokens: 10, completion_tokens: 2 } });
  anonThread = await chatTurn(coachId, {
    message: 'Hi',
    externalIdentity: { anonymousVisitorId: 'anon-2' },
  });

  const created = await ts.api(`/apps/${coachId}/memory/threads`, {
    method: 'POST',
    key: ws.apiKey,
    json: { title: 'Imported', sessionId: 'sess-9' },
  });
  savedThread = (await json(created)).data.id;
  const saved = await ts.api(`/apps/${coachId}/memory/save-messages`, {
    method: 'POST',
    key: ws.apiKey,
    json: {
      threadId: savedThread,
      messages: [
        { role: 'user', content: `é${'x'.repeat(4100)}` },
        { role: 'assistant', content: 'short' },
      ],
    },
  });
  expect(saved.status).toBe(201);
  await ts.api(`/apps/${coachId}/memory/threads/${savedThread}`, {
    method: 'PATCH',
    key: ws.apiKey,
    json: { status: 'archived' },
  });

  // Activity times the date filters can tell apart.
  await setUpdatedAt(chatThread, '2026-03-10T12:00:00Z');
  await setUpdatedAt(anonThread, '2026-04-10T12:00:00Z');
  await setUpdatedAt(savedThread, '2026-05-10T12:00:00Z');
});
afterAll(() => ts?.close());

describe('GET /workspaces/{workspaceId}/insights/conversations', () => {
  it('lists the workspace conversations, most recently active first, with app name, user key and usage', async () => {
    const res = await insights();
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body.meta).toEqual({ limit: 20, offset: 0, total: 3 });
    expect(body.data.map((c: { id: string }) => c.id)).toEqual([savedThread, anonThread, chatThread]);
    const chat = body.data[2];
    expect(chat).toEqual({
      id: chatThread,
      workspace_id: ws.workspaceId,
      app_id: tutorId,
      app_name: 'Tutor',
      session_id: 'sess-1',
      title: 'New Thread',
      status: 'active',
      message_count: 4,
      created_at: expect.any(String),
      updated_at: '2026-03-10T12:00:00.000Z',
      metadata: { external_user_id: 'pupil-1', anonymous_visitor_id: 'anon-1' },
      user_key: 'pupil-1',
      // fake-chat costs $1 / $2 per million input / output tokens: 1000 + 20 and 2000 + 40 micros.
      usage_summary: { totalCostUsd: 0.00306, inputTokens: 3000, outputTokens: 30, requestCount: 2 },
    });
    expect(body.data[1]).toMatchObject({ app_name: 'Coach', user_key: 'anon-2', message_count: 2 });
    expect(body.data[0]).toMatchObject({
      title: 'Imported',
      status: 'archived',
      user_key: 'sess-9',
      usage_summary: { totalCostUsd: 0, inputTokens: 0, outputTokens: 0, requestCount: 0 },
    });
  });

  it('filters by time, app, user key and status, and pages with clamped limit and offset', async () => {
    const ids = async (query: string) => {
      const res = await insights(query);
      expect(res.status, query).toBe(200);
      return (await json(res)).data.map((c: { id: string }) => c.id);
    };
    expect(await ids('?from=2026-04-01&to=2026-04-30T23:59:59Z')).toEqual([anonThread]);
    expect(await ids('?from=2026-04-10T12:00:00%2B00:00')).toEqual([savedThread, anonThread]);
    expect(await ids('?to=2026-03-10T12:00:00Z')).toEqual([chatThread]);
    expect(await ids('?to=2026-03-10T11:59:59')).toEqual([]); // no zone: UTC
    // A bare date is midnight UTC; as `to` it covers the whole day.
    expect(await ids('?from=2026-04-10&to=2026-04-10')).toEqual([anonThread]);
    expect(await ids('?from=2026-04-11&to=2026-05-10')).toEqual([savedThread]);
    await setUpdatedAt(savedThread, '2026-05-10T23:59:59.999999Z');
    expect(await ids('?to=2026-05-10&from=2026-05-10')).toEqual([savedThread]);
    await setUpdatedAt(savedThread, '2026-05-11T00:00:00Z');
    expect(await ids('?to=2026-05-10&from=2026-05-10')).toEqual([]);
    await setUpdatedAt(savedThread, '2026-05-10T12:00:00Z');
    expect(await ids(`?app_id=${tutorId}`)).toEqual([chatThread]);
    expect(await ids(`?app_id=${tutorId}&app_id=${coachId}`)).toEqual([savedThread, anonThread, chatThread]);
    expect(await ids(`?app_ids=${coachId},${randomUUID()}`)).toEqual([savedThread, anonThread]);
    expect(await ids('?app_id=not-a-uuid')).toEqual([]);
    for (const key of ['pupil-1', 'anon-1', 'sess-1'])
      expect(await ids(`?user_key=${key}`)).toEqual([chatThread]);
    expect(await ids('?user_key=anon-2')).toEqual([anonThread]);
    expect(await ids('?status=archived')).toEqual([savedThread]);
    expect(await ids('?status=active&app_id=' + coachId)).toEqual([anonThread]);

    const page = await json(await insights('?limit=1&offset=1'));
    expect(page.meta).toEqual({ limit: 1, offset: 1, total: 3 });
    expect(page.data.map((c: { id: string }) => c.id)).toEqual([anonThread]);
    expect((await json(await insights('?limit=500'))).meta).toMatchObject({ limit: 100 });
    expect((await json(await insights('?limit=0&offset=-5'))).meta).toMatchObject({ limit: 1, offset: 0 });
  });

  it('answers 400 with a message for malformed parameters', async () => {
    for (const [query, error] of [
      ['?limit=abc', 'limit must be a number'],
      ['?offset=1.5', 'offset must be a number'],
      ['?from=yesterday', 'from must be an ISO 8601 date'],
      ['?to=2026-13-45', 'to must be an ISO 8601 date'],
      ['?status=deleted', 'Invalid status. Must be one of: active, archived, closed'],
    ] as const) {
      const res = await insights(query);
      expect(res.status, query).toBe(400);
      expect((await json(res)).error, query).toBe(error);
    }
  });

  it('401 Unauthorized for another workspace id, 401 Invalid API key without a key or with a widget token; nothing leaks across workspaces', async () => {
    const foreign = await insights('', ws.apiKey, other.workspaceId);
    expect(foreign.status).toBe(401);
    expect(await json(foreign)).toEqual({ error: 'Unauthorized' });
    const mine = await insights('', other.apiKey, other.workspaceId);
    expect(await json(mine)).toEqual({ data: [], meta: { limit: 20, offset: 0, total: 0 } });
    const noKey = await ts.api(`/workspaces/${ws.workspaceId}/insights/conversations`);
    expect(noKey.status).toBe(401);
    expect(await json(noKey)).toEqual({ error: 'Invalid API key' });
    // Widget tokens are for an app's browser widget, not for the workspace's analytics.
    const widget = await json(
      await ts.api('/widget-tokens', {
        method: 'POST',
        key: ws.apiKey,
        json: { appId: tutorId, allowedOrigins: ['https://school.example'] },
      }),
    );
    const viaWidget = await ts.api(`/workspaces/${ws.workspaceId}/insights/conversations`, {
      key: widget.token,
      headers: { origin: 'https://school.example' },
    });
    expect(viaWidget.status).toBe(401);
    expect(await json(viaWidget)).toEqual({ error: 'Invalid API key' });
  });
});

describe('GET /workspaces/{workspaceId}/insights/conversations/{threadId}', () => {
  it('returns messages, usage records with component lines and the usage events', async () => {
    const res = await insights(`/${chatThread}`);
    expect(res.status).toBe(200);
    const { data } = await json(res);
    expect(data).toMatchObject({
      id: chatThread,
      workspace_id: ws.workspaceId,
      app_id: tutorId,
      session_id: 'sess-1',
      status: 'active',
      message_count: 4,
      metadata: { external_user_id: 'pupil-1' },
    });
    expect(
      data.messages.map((m: { role: string; content: string; sequence_number: number }) => [
        m.role,
        m.content,
        m.sequence_number,
      ]),
    ).toEqual([
      ['user', 'What is photosynthesis?', 1],
      ['assistant', 'Sugar from light.', 2],
      ['user', 'And at night?', 3],
      ['assistant', 'And at night, respiration.', 4],
    ]);
    expect(data.messages[1]).toEqual({
      id: expect.any(String),
      role: 'assistant',
      content: 'Sugar from light.',
      sequence_number: 2,
      created_at: expect.any(String),
      provider_status: 'success',
      error_code: null,
    });
    expect(data.usage_records).toHaveLength(2);
    const [first, second] = data.usage_records;
    expect(first).toEqual({
      id: expect.any(String),
      request_id: expect.any(String),
      cost_usd: 0.00102,
      input_tokens: 1000,
      output_tokens: 10,
      usage_timestamp: expect.any(String),
      endpoint: '/apps/{appId}/chat/message',
      model: 'fake-chat',
      provider_status: 'success',
      component_lines: [
        { component: 'input_tokens', quantity: 1000, unit_price_usd: 0.000001, cost_usd: 0.001 },
        { component: 'output_tokens', quantity: 10, unit_price_usd: 0.000002, cost_usd: 0.00002 },
      ],
    });
    expect(second).toMatchObject({ input_tokens: 2000, output_tokens: 20, cost_usd: 0.00204 });
    // Newest record first; one event per component line.
    expect(data.usage_events.map((e: { id: string }) => e.id)).toEqual([
      `${second.id}:0`,
      `${second.id}:1`,
      `${first.id}:0`,
      `${first.id}:1`,
    ]);
    expect(data.usage_events[0]).toEqual({
      id: `${second.id}:0`,
      usage_record_id: second.id,
      request_id: second.request_id,
      component: 'input_tokens',
      quantity: 2000,
      unit_price_usd: 0.000001,
      cost_usd: 0.002,
      endpoint: '/apps/{appId}/chat/message',
      model: 'fake-chat',
      provider_status: 'success',
      usage_timestamp: second.usage_timestamp,
    });
  });

  it('cuts message content at 4000 characters with an ellipsis', async () => {
    const { data } = await json(await insights(`/${savedThread}`));
    const [long, short] = data.messages;
    expect([...long.content]).toHaveLength(4001);
    expect(long.content).toBe(`é${'x'.repeat(3999)}…`);
    expect(short.content).toBe('short');
    expect(data.usage_records).toEqual([]);
    expect(data.usage_events).toEqual([]);
  });

  it('keeps only the 200 most recent usage events', async () => {
    const em = ts.server.deps.em();
    const lines = JSON.stringify(
      Array.from({ length: 3 }, (_, i) => ({
        component: `c${i}`,
        quantity: 1,
        unitPriceMicros: 1,
        costMicros: 1,
      })),
    );
    for (let i = 0; i < 70; i++) {
      await em.execute(
        `insert into usage_records (id, workspace_id, thread_id, request_id, endpoint, model, meter,
           input_tokens, output_tokens, cost_micros, provider_status, component_lines, created_at)
         values (?, ?, ?, ?, '/apps/{appId}/chat/message', 'fake-chat', 'credits', 1, 1, 3, 'success', ?::jsonb,
           now() - make_interval(secs => ?))`,
        [randomUUID(), ws.workspaceId, anonThread, `req-${i}`, lines, 1000 - i],
      );
    }
    const { data } = await json(await insights(`/${anonThread}`));
    expect(data.usage_records).toHaveLength(71);
    expect(data.usage_events).toHaveLength(200);
    // The newest record (the chat turn) comes first, then the inserted ones from req-69 down.
    expect(data.usage_events[0].usage_record_id).toBe(data.usage_records[70].id);
    expect(data.usage_events[2].request_id).toBe('req-69');
    expect(data.usage_events.at(-1).request_id).toBe(`req-${69 - 65}`);
    const summary = (await json(await insights(`?app_id=${coachId}&status=active`))).data[0].usage_summary;
    expect(summary.requestCount).toBe(71);
  });

  it('404 Conversation not found for unknown, malformed and foreign thread ids; 401 for another workspace id', async () => {
    for (const id of [randomUUID(), 'not-a-uuid']) {
      const res = await insights(`/${id}`);
      expect(res.status, id).toBe(404);
      expect(await json(res)).toEqual({ error: 'Conversation not found' });
    }
    const foreignThread = await insights(`/${chatThread}`, other.apiKey, other.workspaceId);
    expect(foreignThread.status).toBe(404);
    expect(await json(foreignThread)).toEqual({ error: 'Conversation not found' });
    const foreignWs = await insights(`/${chatThread}`, other.apiKey, ws.workspaceId);
    expect(foreignWs.status).toBe(401);
    expect(await json(foreignWs)).toEqual({ error: 'Unauthorized' });
  });
});
