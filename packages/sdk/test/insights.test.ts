import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AiSuite, BadRequestError, NotFoundError } from '../src/index.js';

let ts: TestServer & { fake: FakeOpenAI };
let client: AiSuite;
let appId: string;
let threadId: string;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  const ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey });
  appId = (await client.apps.create({ name: 'Analytics tutor' })).app.id;
  ts.fake.script({ text: 'Hello!', usage: { prompt_tokens: 100, completion_tokens: 5 } });
  threadId = (
    await client.apps.chat(appId, {
      message: 'Hi',
      role: 'student',
      externalIdentity: { externalUserId: 'pupil-7' },
    })
  ).threadId;
});
afterAll(() => ts?.close());

describe('client.insights.conversations', () => {
  it('lists conversations with filters and reads one with its usage', async () => {
    const list = await client.insights.conversations.list({ app_id: [appId], user_key: 'pupil-7', limit: 5 });
    expect(list.meta).toEqual({ limit: 5, offset: 0, total: 1 });
    expect(list.data[0]).toMatchObject({
      id: threadId,
      app_name: 'Analytics tutor',
      user_key: 'pupil-7',
      usage_summary: { inputTokens: 100, outputTokens: 5, requestCount: 1, totalCostUsd: 0.00011 },
    });
    expect((await client.insights.conversations.list({ status: 'archived' })).data).toEqual([]);

    const { data: detail } = await client.insights.conversations.get(threadId);
    expect(detail.messages.map((m) => m.content)).toEqual(['Hi', 'Hello!']);
    expect(detail.usage_records).toHaveLength(1);
    expect(detail.usage_events.map((e) => e.component)).toEqual(['input_tokens', 'output_tokens']);
  });

  it('throws typed errors: 400 for a bad filter, 404 for an unknown conversation', async () => {
    await expect(client.insights.conversations.list({ from: 'yesterday' })).rejects.toBeInstanceOf(
      BadRequestError,
    );
    const err = await client.insights.conversations
      .get('00000000-0000-4000-8000-000000000000')
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as NotFoundError).message).toContain('Conversation not found');
  });
});
