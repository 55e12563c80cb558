import { afterAll, beforeAll, expect, it } from 'vitest';
import { type ImageTestServer, startImageTestServer } from '../domains/image/test-helpers.js';
import { createTestWorkspace, type TestWorkspace } from '../test/harness.js';

let ts: ImageTestServer;
let ws: TestWorkspace;
let metricsUrl: string;

beforeAll(async () => {
  ts = await startImageTestServer({ env: { METRICS_PORT: '0' } });
  const again = await ts.server.listen(0, '127.0.0.1');
  metricsUrl = again.metricsUrl as string;
  again.http.close();
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
}, 120_000);

afterAll(async () => {
  await ts?.close();
});

const value = (text: string, name: string, labels: string[]) =>
  text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) && labels.every((x) => l.includes(x)))
    .reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);

it('observes an image generation as a GenAI `image` call, with the tokens the provider reported', async () => {
  const res = await ts.api('/image', {
    method: 'POST',
    key: ws.apiKey,
    json: { profile: 'ultrasound', provider: 'openai', operation: 'generate', prompt: 'a heart' },
  });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
  const text = await (await fetch(metricsUrl)).text();
  const op = [
    'gen_ai_operation_name="image"',
    'gen_ai_provider_name="openai"',
    'gen_ai_request_model="gpt-image-1"',
  ];
  expect(value(text, 'gen_ai_client_operation_duration_seconds_count', [...op, 'error_type=""'])).toBe(1);
  expect(ts.openai.requests).toHaveLength(1);
  const input = value(text, 'gen_ai_client_token_usage_sum', [...op, 'gen_ai_token_type="input"']);
  const output = value(text, 'gen_ai_client_token_usage_sum', [...op, 'gen_ai_token_type="output"']);
  // The fake reports ceil(prompt characters / 4) input and 272 output tokens.
  expect(input).toBe(Math.ceil('a heart'.length / 4));
  expect(output).toBe(272);
});
