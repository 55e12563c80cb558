import {
  createTestWorkspace,
  startTestServerWithFakeModel,
  type TestWorkspace,
} from '@ai-suite/server/test-harness';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AiSuite, AiSuiteError } from '../src/index.js';

let ts: Awaited<ReturnType<typeof startTestServerWithFakeModel>>;
let ws: TestWorkspace;
beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts);
});
afterAll(() => ts?.close());

describe('client.openAICompatible()', () => {
  it('configures the official openai client for the OpenAI-compatible surface', async () => {
    const suite = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey });
    const config = suite.openAICompatible();
    expect(config).toEqual({ baseURL: `${ts.url}/api/v1/openai`, apiKey: ws.apiKey });
    ts.fake.script({ text: 'Hi there' });
    const openai = new OpenAI({ ...config, maxRetries: 0 });
    const res = await openai.chat.completions.create({
      model: 'fake-chat',
      messages: [{ role: 'user', content: 'hello' }],
    });
    expect(res.choices[0]?.message.content).toBe('Hi there');
  });

  it('needs an API key', () => {
    expect(() => new AiSuite({ baseURL: ts.url, sessionToken: 'svc_ss_x' }).openAICompatible()).toThrow(
      AiSuiteError,
    );
  });
});
