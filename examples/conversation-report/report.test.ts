import { AiSuite } from '@ai-suite/sdk';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conversationReport, toMarkdown } from './main.js';

let ts: TestServer & { fake: FakeOpenAI };
let client: AiSuite;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  client = new AiSuite({
    baseURL: ts.url,
    apiKey: (await createTestWorkspace(ts, { creditsUsd: '5' })).apiKey,
  });
});
afterAll(() => ts?.close());

describe('examples/conversation-report', () => {
  it('aggregates the conversations through Insights and gets a report through Artifacts', async () => {
    const tutor = (await client.apps.create({ name: 'Tutor' })).app.id;
    const coach = (await client.apps.create({ name: 'Coach' })).app.id;
    ts.fake.script(
      { text: 'Light becomes sugar.', usage: { prompt_tokens: 1000, completion_tokens: 20 } },
      { text: 'Try a warm-up.', usage: { prompt_tokens: 100, completion_tokens: 10 } },
      { text: 'Mitochondria.', usage: { prompt_tokens: 500, completion_tokens: 5 } },
    );
    await client.apps.chat(tutor, {
      message: 'What is photosynthesis?',
      role: 'student',
      externalIdentity: { externalUserId: 'u1' },
    });
    await client.apps.chat(coach, {
      message: 'How do I start running?',
      role: 'member',
      externalIdentity: { externalUserId: 'u2' },
    });
    await client.apps.chat(tutor, {
      message: 'Powerhouse of the cell?',
      role: 'student',
      externalIdentity: { externalUserId: 'u1' },
    });

    const report = {
      executiveSummary: Array.from({ length: 125 }, (_, i) => `w${i}`).join(' '),
      insights: [
        {
          title: 'Tutor leads',
          body: 'Two of three conversations.',
          category: 'key_development',
          evidence: ['2 of 3'],
        },
      ],
      followUpConsiderations: [
        { title: 'Grow Coach', body: 'One conversation only.', attentionLevel: 'for_awareness' },
      ],
      confidenceNotes: 'Three conversations.',
    };
    ts.fake.script({ text: JSON.stringify(report), usage: { prompt_tokens: 800, completion_tokens: 300 } });
    const lines: string[] = [];
    const out = await conversationReport({ client, samples: 2, log: (l) => lines.push(l) });

    expect(out.conversations).toBe(3);
    expect(out.usage).toMatchObject({ inputTokens: 800, outputTokens: 300 });
    const sent = ts.fake.requests.at(-1)?.body;
    const payload = JSON.parse(sent.messages[1].content);
    expect(payload.aggregates.metrics).toMatchObject({
      conversations: 3,
      distinctUsers: 2,
      messages: 6,
      modelRequests: 3,
      inputTokens: 1600,
      outputTokens: 35,
      costUsd: 0.00167,
    });
    expect(payload.aggregates.breakdowns[0]).toEqual({
      dimension: 'app',
      rows: [
        { key: 'Tutor', count: 2 },
        { key: 'Coach', count: 1 },
      ],
    });
    // The two costliest conversations, with their first question.
    expect(payload.samples.map((s: { fields: { firstQuestion: string } }) => s.fields.firstQuestion)).toEqual(
      ['What is photosynthesis?', 'Powerhouse of the cell?'],
    );
    const md = toMarkdown(out.report);
    expect(md).toContain('### Tutor leads (key development)');
    expect(md).toContain('- **Grow Coach** (for_awareness): One conversation only.');
    expect(lines[0]).toBe('3 conversations');
  });
});
