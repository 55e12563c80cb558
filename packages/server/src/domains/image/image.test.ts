import { syntheticScanPng } from '@ai-suite/testkit';
import sharp from 'sharp';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestWorkspace, creditBalance, type TestWorkspace } from '../../test/harness.js';
import {
  type ImageTestServer,
  imageBomb,
  OPENAI_KEY,
  OPENAI_PRICE_MICROS,
  REPLICATE_PRICE_MICROS,
  REPLICATE_TOKEN,
  startImageSite,
  startImageTestServer,
} from './test-helpers.js';

let ts: ImageTestServer;
let ws: TestWorkspace;
let site: Awaited<ReturnType<typeof startImageSite>>;
let scanB64: string;

beforeAll(async () => {
  ts = await startImageTestServer();
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  site = await startImageSite();
  scanB64 = (await syntheticScanPng({ width: 64, height: 64, seed: 11 })).toString('base64');
});
afterAll(async () => {
  await site?.close();
  await ts?.close();
});
beforeEach(() => {
  ts.replicate.set({});
  ts.openai.set({});
});

const post = (json: unknown, key = ws.apiKey, init: RequestInit = {}) =>
  ts.api('/image', { method: 'POST', key, json, ...init });

async function pngOf(b64: string) {
  return sharp(Buffer.from(b64, 'base64')).metadata();
}

describe('GET /image', () => {
  it('answers the connectivity check with a key, 401 without', async () => {
    const res = await ts.api('/image', { key: ws.apiKey });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      message: expect.any(String),
      endpoint: '/api/v1/image',
      methods: ['GET', 'POST', 'OPTIONS'],
      profiles: ['ultrasound'],
    });
    const anon = await ts.api('/image');
    expect(anon.status).toBe(401);
    expect(await anon.json()).toEqual({ error: 'Invalid API key' });
    const opts = await ts.api('/image', { method: 'OPTIONS' });
    expect(opts.headers.get('allow')).toBe('GET, POST, OPTIONS');
  });
});

describe('POST /image through the Replicate fake', () => {
  it('generates: default model, Prefer: wait, base64 PNG, one image price charged and recorded', async () => {
    const before = await creditBalance(ts, ws.workspaceId);
    const res = await post({ prompt: 'a kidney in long axis' });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body).toMatchObject({
      model: 'scan-gen',
      prompt: 'a kidney in long axis',
      operation: 'generate',
      tokensUsed: 0,
      provider: 'replicate',
      costMicros: REPLICATE_PRICE_MICROS,
    });
    expect(body.raw_image_id).toBeUndefined();
    expect((await pngOf(body.image)).format).toBe('png');
    const p = [...ts.replicate.predictions.values()].at(-1);
    expect(p?.model).toBe('acme/scan-gen');
    expect(p?.preferWait).toBe('wait=1');
    expect(p?.input).toMatchObject({ prompt: 'a kidney in long axis' });
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before - REPLICATE_PRICE_MICROS);
    const usage = await ts.server.deps
      .em()
      .execute<{ cost_micros: string; component_lines: unknown; provider_status: string }[]>(
        `select cost_micros, component_lines, provider_status from usage_records where request_id = ?`,
        [res.headers.get('x-request-id')],
      );
    expect(Number(usage[0]?.cost_micros)).toBe(REPLICATE_PRICE_MICROS);
    expect(usage[0]?.provider_status).toBe('success');
    expect(JSON.stringify(usage[0]?.component_lines)).toContain('"image"');
  });

  it('polls a long prediction with backoff until it succeeds', async () => {
    ts.replicate.set({ pollsBeforeDone: 4 });
    const res = await post({ prompt: 'slow' });
    expect(res.status).toBe(200);
    const p = [...ts.replicate.predictions.values()].at(-1);
    expect(p?.status).toBe('succeeded');
    expect(p?.polls).toBeGreaterThanOrEqual(4);
  });

  it('edits a base64 image with and without a data: prefix (the source reaches the model)', async () => {
    for (const image of [scanB64, `data:image/png;base64,${scanB64}`]) {
      const res = await post({ prompt: 'denoise', image });
      expect(res.status).toBe(200);
      const body = await res.json();
      expect(body.operation).toBe('edit');
      expect((await pngOf(body.image)).width).toBe(64);
      const p = [...ts.replicate.predictions.values()].at(-1);
      expect(String(p?.input.image)).toBe(`data:image/png;base64,${scanB64}`);
    }
  });

  it('fetches image_url through the guard (allowed host), sniffing the bytes, not the declared type', async () => {
    const res = await post({ prompt: 'denoise', image_url: `${site.url}/scan-as-text` });
    expect(res.status).toBe(200);
    expect((await pngOf((await res.json()).image)).width).toBe(48);
  });

  it('a provider failure is 500 Failed to generate image, without URLs or keys, and costs nothing', async () => {
    ts.replicate.set({ fail: `CUDA out of memory at ${ts.replicate.url}/internal token ${REPLICATE_TOKEN}` });
    const before = await creditBalance(ts, ws.workspaceId);
    const res = await post({ prompt: 'x' });
    expect(res.status).toBe(500);
    const body = await res.json();
    expect(body.error).toMatch(/^Failed to generate image: CUDA out of memory/);
    expect(JSON.stringify(body)).not.toContain(ts.replicate.url);
    expect(JSON.stringify(body)).not.toContain(REPLICATE_TOKEN);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before);
  });

  it("a provider quota refusal is 429 with the provider's message, and costs nothing", async () => {
    ts.replicate.set({ quota: { status: 402, detail: 'You have insufficient credit to run this model.' } });
    const before = await creditBalance(ts, ws.workspaceId);
    const res = await post({ prompt: 'x' });
    expect(res.status).toBe(429);
    expect(await res.json()).toMatchObject({
      error: 'You have insufficient credit to run this model.',
      code: 'PROVIDER_QUOTA_EXCEEDED',
    });
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before);
  });

  it("a throttled create (429) is answered at once with Replicate's message, sent once, and costs nothing", async () => {
    const detail =
      'Request was throttled. Your rate limit for prediction creation is 600 requests per minute.';
    ts.replicate.set({ quota: { status: 429, detail } });
    const before = await creditBalance(ts, ws.workspaceId);
    const creates = () =>
      ts.replicate.requests.filter((r) => r.method === 'POST' && !r.path.endsWith('/cancel'));
    const sent = creates().length;
    const res = await post({ prompt: 'throttled' });
    expect(res.status).toBe(429);
    expect(await res.json()).toEqual({ error: detail, code: 'PROVIDER_QUOTA_EXCEEDED' });
    // The `replicate` client alone would send the create six times; the server sends it once.
    expect(creates().length).toBe(sent + 1);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before);
    const usage = await ts.server.deps
      .em()
      .execute<{ cost_micros: string; provider_status: string }[]>(
        `select cost_micros, provider_status from usage_records where request_id = ?`,
        [res.headers.get('x-request-id')],
      );
    expect(usage.map((u) => [Number(u.cost_micros), u.provider_status])).toEqual([[0, 'error']]);
  });

  it('a throttled poll (429) is polled again and the generation succeeds', async () => {
    ts.replicate.set({ pollsBeforeDone: 3, throttlePolls: 2 });
    const res = await post({ prompt: 'throttled polls' });
    expect(res.status).toBe(200);
    const p = [...ts.replicate.predictions.values()].find((x) => x.input.prompt === 'throttled polls');
    expect(p?.status).toBe('succeeded');
    expect(p?.polls).toBeGreaterThanOrEqual(3);
  });

  it('a caller that goes away cancels the prediction and pays nothing', async () => {
    ts.replicate.set({ hang: true });
    const before = await creditBalance(ts, ws.workspaceId);
    const ctl = new AbortController();
    const pending = post({ prompt: 'hang' }, ws.apiKey, { signal: ctl.signal }).catch((e) => e);
    let p: { status: string; polls: number } | undefined;
    for (let i = 0; i < 400 && !(p && p.polls > 0); i++) {
      await new Promise((r) => setTimeout(r, 10));
      p = [...ts.replicate.predictions.values()].find((x) => x.input.prompt === 'hang');
    }
    ctl.abort();
    await pending;
    for (let i = 0; i < 400 && p?.status !== 'canceled'; i++) await new Promise((r) => setTimeout(r, 10));
    expect(p?.status).toBe('canceled');
    for (let i = 0; i < 200 && (await creditBalance(ts, ws.workspaceId)) !== before; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before);
  });
});

describe('POST /image: the total timeout (IMAGE_TIMEOUT_MS)', () => {
  let quick: ImageTestServer;
  beforeAll(async () => {
    // The same database, a server whose whole provider call may take 300 ms.
    quick = await startImageTestServer({ db: ts.db, env: { IMAGE_TIMEOUT_MS: '300' } });
  });
  afterAll(() => quick?.close());

  it('a prediction that never finishes is canceled at the provider: 500, and nothing is charged', async () => {
    quick.replicate.set({ hang: true });
    const before = await creditBalance(ts, ws.workspaceId);
    const res = await quick.api('/image', { method: 'POST', key: ws.apiKey, json: { prompt: 'forever' } });
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({
      error: 'Failed to generate image: timed out after 0.3 s',
      code: 'IMAGE_GENERATION_FAILED',
    });
    // On a loaded machine the deadline may pass while the create is still on its way: the cancel
    // then follows the create's answer instead of preceding the 500, so it is waited for.
    await expect.poll(() => quick.replicate.predictions.size, { timeout: 20_000 }).toBe(1);
    const [p] = [...quick.replicate.predictions.values()];
    await expect.poll(() => p?.status, { timeout: 20_000 }).toBe('canceled');
    // Prefer: wait is capped by the total timeout (here: under a second, so none is sent).
    expect(p?.preferWait).toBeNull();
    expect(
      quick.replicate.requests.filter(
        (r) => r.method === 'POST' && r.path === `/v1/predictions/${p?.id}/cancel`,
      ),
    ).toHaveLength(1);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before);
    const usage = await ts.server.deps
      .em()
      .execute<{ cost_micros: string; provider_status: string }[]>(
        `select cost_micros, provider_status from usage_records where request_id = ?`,
        [res.headers.get('x-request-id')],
      );
    expect(usage.map((u) => [Number(u.cost_micros), u.provider_status])).toEqual([[0, 'error']]);
  });
  it('a create that stalls after Replicate accepted it: 500 at the deadline, the prediction canceled when its id arrives', async () => {
    quick.replicate.set({ hang: true, createAnswerDelayMs: 1500 });
    const before = await creditBalance(ts, ws.workspaceId);
    const known = new Set(quick.replicate.predictions.keys());
    const res = await quick.api('/image', { method: 'POST', key: ws.apiKey, json: { prompt: 'stalled' } });
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({
      error: 'Failed to generate image: timed out after 0.3 s',
      code: 'IMAGE_GENERATION_FAILED',
    });
    const created = () => [...quick.replicate.predictions.values()].filter((p) => !known.has(p.id));
    await expect.poll(() => created().length, { timeout: 20_000 }).toBe(1);
    // The answer came before the create's: the cancel follows once the id is known.
    await expect.poll(() => created()[0]?.status, { timeout: 20_000 }).toBe('canceled');
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before);
    quick.replicate.set({});
  });
});

describe('POST /image: the ultrasound profile and the OpenAI-compatible provider', () => {
  it('applies the profile defaults and enhances the result (less speckle, same size, PNG)', async () => {
    const noisy = await syntheticScanPng({ width: 96, height: 96, seed: 5, speckle: 0.6 });
    const res = await post({ profile: 'ultrasound', image: noisy.toString('base64') });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body).toMatchObject({ profile: 'ultrasound', operation: 'edit', provider: 'replicate' });
    expect(body.prompt).toMatch(/ultrasound/i);
    const out = Buffer.from(body.image, 'base64');
    const meta = await sharp(out).metadata();
    expect([meta.format, meta.width, meta.height]).toEqual(['png', 96, 96]);
    // Tissue against cyst, in units of the tissue's grain (contrast-to-noise ratio): rises when
    // speckle falls and contrast rises (enhance.test.ts measures each on its own).
    const region = async (b: Buffer, left: number, top: number, width: number, height: number) => {
      const data = await sharp(b).extract({ left, top, width, height }).greyscale().raw().toBuffer();
      const m = data.reduce((s, v) => s + v, 0) / data.length;
      return { m, sd: Math.sqrt(data.reduce((s, v) => s + (v - m) ** 2, 0) / data.length) };
    };
    const cnr = async (b: Buffer) => {
      const t = await region(b, 8, 8, 40, 12);
      const c = await region(b, 40, 45, 16, 16);
      return (t.m - c.m) / t.sd;
    };
    expect(await cnr(out)).toBeGreaterThan((await cnr(noisy)) * 2);
  });

  it('uses the OpenAI images API with profile ultrasound: multipart edit, tokens reported and charged', async () => {
    const before = await creditBalance(ts, ws.workspaceId);
    const res = await post({ profile: 'ultrasound', provider: 'openai', image: scanB64 });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body).toMatchObject({ model: 'gpt-image-1', provider: 'openai', operation: 'edit' });
    expect(body.tokensUsed).toBeGreaterThan(0);
    const last = ts.openai.requests.at(-1);
    expect(last?.path).toBe('/v1/images/edits');
    expect(last?.headers.authorization).toBe(`Bearer ${OPENAI_KEY}`);
    expect(body.costMicros).toBeGreaterThan(OPENAI_PRICE_MICROS);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before - body.costMicros);
  });

  it('generates with the OpenAI provider (images.generate) under the profile with operation generate', async () => {
    const res = await post({
      profile: 'ultrasound',
      provider: 'openai',
      operation: 'generate',
      prompt: 'a heart',
    });
    expect(res.status).toBe(200);
    expect(ts.openai.requests.at(-1)?.path).toBe('/v1/images/generations');
  });

  it('refuses the alternative provider without the profile, and maps its quota to 429', async () => {
    const res = await post({ provider: 'openai', prompt: 'x' });
    expect(res.status).toBe(400);
    expect((await res.json()).code).toBe('PROVIDER_NOT_ALLOWED');
    const byModel = await post({ model: 'gpt-image-1', prompt: 'x' });
    expect(byModel.status).toBe(400);
    expect((await byModel.json()).code).toBe('PROVIDER_NOT_ALLOWED');
    ts.openai.set({ quota: 'You exceeded your current quota, please check your plan and billing details.' });
    const before = await creditBalance(ts, ws.workspaceId);
    const sent = ts.openai.requests.length;
    const quota = await post({ profile: 'ultrasound', provider: 'openai', image: scanB64 });
    expect(quota.status).toBe(429);
    expect(await quota.json()).toEqual({
      error: 'You exceeded your current quota, please check your plan and billing details.',
      code: 'PROVIDER_QUOTA_EXCEEDED',
    });
    // Sent once: the `openai` client's retries are off for images.
    expect(ts.openai.requests.length).toBe(sent + 1);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before);
  });

  it('a caller that goes away aborts the OpenAI-compatible request and pays nothing', async () => {
    ts.openai.set({ hang: true });
    const before = await creditBalance(ts, ws.workspaceId);
    const sent = ts.openai.requests.length;
    const ctl = new AbortController();
    const pending = post({ profile: 'ultrasound', provider: 'openai', image: scanB64 }, ws.apiKey, {
      signal: ctl.signal,
    }).catch((e) => e);
    await expect.poll(() => ts.openai.requests.length, { timeout: 10_000 }).toBe(sent + 1);
    ctl.abort();
    await pending;
    await expect.poll(() => ts.openai.requests.at(-1)?.aborted, { timeout: 10_000 }).toBe(true);
    await expect.poll(() => creditBalance(ts, ws.workspaceId), { timeout: 10_000 }).toBe(before);
    const usage = await ts.server.deps
      .em()
      .execute<{ provider_status: string }[]>(
        `select provider_status from usage_records where workspace_id = ? order by created_at desc limit 1`,
        [ws.workspaceId],
      );
    expect(usage[0]?.provider_status).toBe('aborted');
  });
});

describe('POST /image: rules and hostile input, each a 4xx that costs nothing and calls no provider', () => {
  const cases: [string, () => Promise<unknown>, number, Record<string, unknown>][] = [
    ['no prompt', async () => ({}), 400, { error: 'Prompt is required' }],
    [
      'edit without a source',
      async () => ({ prompt: 'x', operation: 'edit' }),
      400,
      { code: 'MISSING_IMAGE_INPUT' },
    ],
    [
      'two sources',
      async () => ({ prompt: 'x', image: scanB64, image_url: `${site.url}/scan.png` }),
      400,
      { code: 'MULTIPLE_IMAGE_INPUTS' },
    ],
    ['unknown model', async () => ({ prompt: 'x', model: 'nope' }), 400, { error: 'Invalid model' }],
    [
      'oversized base64',
      async () => ({ prompt: 'x', image: 'A'.repeat(500_000) }),
      413,
      { code: 'IMAGE_TOO_LARGE' },
    ],
    [
      'base64 that is not an image',
      async () => ({ prompt: 'x', image: Buffer.from('%PDF-1.7 not an image').toString('base64') }),
      400,
      { code: 'UNSUPPORTED_IMAGE_TYPE' },
    ],
    ['not base64 at all', async () => ({ prompt: 'x', image: '***' }), 400, { code: 'INVALID_IMAGE' }],
    [
      'an image bomb',
      async () => ({ prompt: 'x', image: (await imageBomb()).toString('base64') }),
      400,
      { code: 'IMAGE_TOO_LARGE' },
    ],
    [
      'image_url to a private address',
      async () => ({ prompt: 'x', image_url: `${site.privateUrl}/scan.png` }),
      400,
      { code: 'URL_NOT_ALLOWED' },
    ],
    [
      'image_url redirecting to a private address',
      async () => ({ prompt: 'x', image_url: `${site.url}/to-private` }),
      400,
      { code: 'URL_NOT_ALLOWED' },
    ],
    [
      'image_url of a web page',
      async () => ({ prompt: 'x', image_url: `${site.url}/page.html` }),
      400,
      { code: 'UNSUPPORTED_IMAGE_TYPE' },
    ],
    [
      'image_url declaring image/png over HTML',
      async () => ({ prompt: 'x', image_url: `${site.url}/html-as-png` }),
      400,
      { code: 'UNSUPPORTED_IMAGE_TYPE' },
    ],
    [
      'image_url answering 404',
      async () => ({ prompt: 'x', image_url: `${site.url}/missing` }),
      400,
      { code: 'IMAGE_FETCH_FAILED' },
    ],
    [
      'image_url with another scheme',
      async () => ({ prompt: 'x', image_url: 'file:///etc/passwd' }),
      400,
      { code: 'URL_NOT_ALLOWED' },
    ],
    [
      'raw_image_id that is no stored image',
      async () => ({ prompt: 'x', raw_image_id: '00000000-0000-4000-8000-000000000000' }),
      404,
      { error: 'File not found' },
    ],
    ['an unknown field', async () => ({ prompt: 'x', imageUrl: 'y' }), 400, { code: 'VALIDATION_ERROR' }],
  ];

  it.each(cases)('%s', async (_name, body, status, expected) => {
    const before = await creditBalance(ts, ws.workspaceId);
    const calls = ts.replicate.requests.length + ts.openai.requests.length;
    const res = await post(await body());
    expect(res.status).toBe(status);
    expect(await res.json()).toMatchObject(expected);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before);
    expect(ts.replicate.requests.length + ts.openai.requests.length).toBe(calls);
  });

  it('402 INSUFFICIENT_CREDITS before any provider call', async () => {
    const poor = await createTestWorkspace(ts);
    const calls = ts.replicate.requests.length;
    const res = await post({ prompt: 'x' }, poor.apiKey);
    expect(res.status).toBe(402);
    expect(await res.json()).toEqual({
      error: 'Insufficient credits. Please purchase additional credits to continue.',
      code: 'INSUFFICIENT_CREDITS',
    });
    expect(ts.replicate.requests.length).toBe(calls);
  });

  it('401 Invalid API key', async () => {
    const res = await post({ prompt: 'x' }, 'sk_nope');
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Invalid API key' });
  });
});
