import OpenAI from 'openai';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  creditBalance,
  fakeOpenAIEnv,
  startFakeOpenAI,
  type TestWorkspace,
} from '../../test/harness.js';
import { REPLICATE_PRICE_MICROS, startImageTestServer } from '../image/test-helpers.js';

// One server with the image fakes (Replicate) and the fake OpenAI upstream (chat, embeddings).
let fake: Awaited<ReturnType<typeof startFakeOpenAI>>;
let ts: Awaited<ReturnType<typeof startImageTestServer>>;
let ws: TestWorkspace;
let client: OpenAI;
beforeAll(async () => {
  fake = await startFakeOpenAI();
  ts = await startImageTestServer({ env: fakeOpenAIEnv(fake) });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  client = new OpenAI({ baseURL: `${ts.url}/api/v1/openai`, apiKey: ws.apiKey, maxRetries: 0 });
});
afterAll(async () => {
  await ts?.close();
  await fake?.close();
});

const sql = <T>(q: string, params: unknown[] = []) => ts.server.deps.em().execute<T[]>(q, params);
const usageOf = async (requestId: string) => {
  await expect
    .poll(async () => (await sql('select 1 from usage_records where request_id = ?', [requestId])).length)
    .toBe(1);
  return (
    await sql<Record<string, string>>('select * from usage_records where request_id = ?', [requestId])
  )[0];
};

describe('POST /openai/embeddings', () => {
  it('answers floats and base64 (the openai client decodes it), metered by credits', async () => {
    const before = await creditBalance(ts, ws.workspaceId);
    const { data: floats, response } = await client.embeddings
      .create({ model: 'fake-embed', input: ['alpha', 'beta'], encoding_format: 'float' })
      .withResponse();
    expect(floats.object).toBe('list');
    expect(floats.data.map((d) => d.index)).toEqual([0, 1]);
    expect(floats.data[0]?.embedding.length).toBeGreaterThan(0);
    expect(floats.usage.prompt_tokens).toBeGreaterThan(0);
    // The client asks for base64 by default and decodes float32 little-endian.
    const b64 = await client.embeddings.create({ model: 'fake-embed', input: 'alpha' });
    const a = floats.data[0]?.embedding as number[];
    const b = b64.data[0]?.embedding as number[];
    expect(b).toHaveLength(a.length);
    for (let i = 0; i < a.length; i++) expect(b[i]).toBeCloseTo(a[i] as number, 6);
    expect(fake.requests.filter((r) => r.path.endsWith('/embeddings'))).toHaveLength(2);

    const row = await usageOf(response.headers.get('x-request-id') as string);
    expect(row).toMatchObject({
      endpoint: '/openai/embeddings',
      model: 'fake-embed',
      meter: 'credits',
      api_key_id: ws.keyId,
    });
    expect(Number(row?.input_tokens)).toBe(floats.usage.prompt_tokens);
    expect(await creditBalance(ts, ws.workspaceId)).toBeLessThanOrEqual(before);
  });

  it('refuses token arrays, dimensions, an unknown model and an empty input (400/404), costing nothing', async () => {
    const n = fake.requests.length;
    const cases: [Record<string, unknown>, number, string | null][] = [
      [{ model: 'fake-embed', input: [[1, 2, 3]] }, 400, 'input[0]'],
      [{ model: 'fake-embed', input: 'x', dimensions: 8 }, 400, 'dimensions'],
      [{ model: 'fake-embed', input: [] }, 400, 'input'],
      [{ model: 'fake-embed', input: 'x', encoding_format: 'int8' }, 400, 'encoding_format'],
      [{ model: 'fake-chat', input: 'x' }, 404, 'model'],
    ];
    for (const [json, status, param] of cases) {
      const res = await ts.api('/openai/embeddings', { method: 'POST', key: ws.apiKey, json });
      expect(res.status, JSON.stringify(json)).toBe(status);
      expect((await res.json()).error.param).toBe(param);
      expect(
        await sql('select 1 from usage_records where request_id = ?', [res.headers.get('x-request-id')]),
      ).toHaveLength(0);
    }
    expect(fake.requests.length).toBe(n);
  });

  it('429 insufficient_quota when the credits are spent', async () => {
    const broke = await createTestWorkspace(ts);
    const c = new OpenAI({ baseURL: `${ts.url}/api/v1/openai`, apiKey: broke.apiKey, maxRetries: 0 });
    const err = await c.embeddings.create({ model: 'fake-embed', input: 'x' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect(err).toMatchObject({ code: 'insufficient_quota' });
  });
});

describe('POST /openai/images/generations', () => {
  it('generates one image through the image capability, b64_json PNG, the image price charged', async () => {
    const before = await creditBalance(ts, ws.workspaceId);
    const { data, response } = await client.images
      .generate({ model: 'scan-gen', prompt: 'a kidney in long axis' })
      .withResponse();
    expect(data.data).toHaveLength(1);
    const png = Buffer.from(data.data?.[0]?.b64_json as string, 'base64');
    expect((await sharp(png).metadata()).format).toBe('png');
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before - REPLICATE_PRICE_MICROS);
    const row = await usageOf(response.headers.get('x-request-id') as string);
    expect(row).toMatchObject({ endpoint: '/image', provider_status: 'success' });
  });

  it('refuses n > 1, url responses, sizes and unknown models, costing nothing', async () => {
    const before = await creditBalance(ts, ws.workspaceId);
    for (const [json, status, param] of [
      [{ prompt: 'x', n: 2 }, 400, 'n'],
      [{ prompt: 'x', response_format: 'url' }, 400, 'response_format'],
      [{ prompt: 'x', size: '1024x1024' }, 400, 'size'],
      [{ prompt: 'x', model: 'dall-e-9' }, 404, 'model'],
      [{ prompt: '' }, 400, 'prompt'],
    ] as const) {
      const res = await ts.api('/openai/images/generations', { method: 'POST', key: ws.apiKey, json });
      expect(res.status, JSON.stringify(json)).toBe(status);
      expect((await res.json()).error.param).toBe(param);
    }
    const err = await client.images.generate({ prompt: 'x', n: 3 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before);
  });

  it('unknown paths under the prefix are OpenAI-shaped 404s', async () => {
    const res = await ts.api('/openai/completions', { method: 'POST', key: ws.apiKey, json: {} });
    expect(res.status).toBe(404);
    expect((await res.json()).error).toMatchObject({ type: 'invalid_request_error', code: 'unknown_url' });
  });
});
