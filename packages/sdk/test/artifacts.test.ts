import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AiSuite, BadRequestError, InsufficientCreditsError } from '../src/index.js';

let ts: TestServer & { fake: FakeOpenAI };
let client: AiSuite;
let broke: AiSuite;

const summary = Array.from({ length: 130 }, (_, i) => `w${i}`).join(' ');

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  const ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey });
  broke = new AiSuite({ baseURL: ts.url, apiKey: (await createTestWorkspace(ts)).apiKey, maxRetries: 0 });
});
afterAll(() => ts?.close());

describe('client.artifacts.generate', () => {
  it('returns the report with its usage, and throws typed errors', async () => {
    ts.fake.script({
      text: JSON.stringify({
        executiveSummary: summary,
        insights: [{ title: 'Up', body: 'More users.', category: 'key_development', evidence: ['80 users'] }],
        followUpConsiderations: [],
        confidenceNotes: 'Small sample.',
      }),
      usage: { prompt_tokens: 1000, completion_tokens: 100 },
    });
    const out = await client.artifacts.generate({
      scope: { level: 'network' },
      input: { aggregates: { recordCount: 3, metrics: { users: 80 } } },
    });
    expect(out.data.outputSnapshot.llm.insights[0]?.title).toBe('Up');
    expect(out.data.outputSnapshot.source).toEqual({
      type: 'customer_payload',
      recordCount: 3,
      sampleCount: 0,
    });
    expect(out.data.usage).toMatchObject({ inputTokens: 1000, outputTokens: 100, costUsd: 0.0012 });
    expect(out.meta.persisted).toBe(true);

    const bad = await client.artifacts
      .generate({ scope: { level: 'galaxy' as 'item' }, input: { aggregates: {} } })
      .catch((e: unknown) => e as BadRequestError);
    expect(bad).toBeInstanceOf(BadRequestError);
    expect((bad as BadRequestError).code).toBe('INVALID_INPUT');
    await expect(
      broke.artifacts.generate({ scope: { level: 'item' }, input: { aggregates: {} } }),
    ).rejects.toBeInstanceOf(InsufficientCreditsError);
  });
});
