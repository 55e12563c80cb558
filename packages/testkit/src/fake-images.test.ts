import OpenAI, { toFile } from 'openai';
import Replicate from 'replicate';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeOpenAIImages, startFakeOpenAIImages } from './fake-openai-images.js';
import { type FakeReplicate, startFakeReplicate } from './fake-replicate.js';
import { syntheticScanPng } from './images.js';

let rep: FakeReplicate;
let oai: FakeOpenAIImages;
beforeAll(async () => {
  rep = await startFakeReplicate({ token: 'r8_test' });
  oai = await startFakeOpenAIImages({ apiKey: 'sk-test' });
});
afterAll(async () => {
  await rep?.close();
  await oai?.close();
});

const client = () => new Replicate({ auth: 'r8_test', baseUrl: rep.baseUrl, useFileOutput: false });

describe('fake Replicate, through the replicate client', () => {
  it('creates with Prefer: wait and answers a succeeded prediction whose output URL the fake serves', async () => {
    rep.set({});
    const p = await client().predictions.create({
      model: 'acme/scan',
      input: { prompt: 'a kidney', width: 40, height: 30 },
      wait: true,
    });
    expect(p.status).toBe('succeeded');
    expect(rep.predictions.get(p.id)?.preferWait).toBe('wait');
    expect(rep.predictions.get(p.id)?.model).toBe('acme/scan');
    const url = (p.output as string[])[0] as string;
    const res = await fetch(url);
    expect(res.headers.get('content-type')).toBe('image/png');
    const meta = await sharp(Buffer.from(await res.arrayBuffer())).metadata();
    expect([meta.format, meta.width, meta.height]).toEqual(['png', 40, 30]);
  });

  it('polls starting → processing → succeeded, and the same prompt draws the same image', async () => {
    rep.set({ pollsBeforeDone: 2 });
    const c = client();
    const p = await c.predictions.create({ model: 'acme/scan', input: { prompt: 'same' } });
    expect(p.status).toBe('starting');
    const first = await c.predictions.get(p.id);
    expect(first.status).toBe('processing');
    const done = await c.wait(first, { interval: 1 });
    expect(done.status).toBe('succeeded');
    rep.set({});
    const again = await c.predictions.create({ model: 'acme/scan', input: { prompt: 'same' }, wait: true });
    const a = rep.outputBytes((done.output as string[])[0] as string);
    const b = rep.outputBytes((again.output as string[])[0] as string);
    expect(a?.equals(b as Buffer)).toBe(true);
  });

  it('edits a data-URI image input', async () => {
    rep.set({});
    const src = await syntheticScanPng({ width: 20, height: 10 });
    const p = await client().predictions.create({
      version: 'abc123',
      input: { prompt: 'clean', image: `data:image/png;base64,${src.toString('base64')}` },
      wait: true,
    });
    expect(p.status).toBe('succeeded');
    const out = rep.outputBytes((p.output as string[])[0] as string) as Buffer;
    expect((await sharp(out).metadata()).width).toBe(20);
  });

  it('fails, cancels, refuses quota, and refuses a wrong token', async () => {
    const c = client();
    rep.set({ fail: 'CUDA out of memory' });
    const failed = await c.predictions.create({ model: 'acme/scan', input: { prompt: 'x' }, wait: true });
    expect([failed.status, failed.error]).toEqual(['failed', 'CUDA out of memory']);

    rep.set({ hang: true });
    const hanging = await c.predictions.create({ model: 'acme/scan', input: { prompt: 'x' } });
    expect((await c.predictions.get(hanging.id)).status).toBe('processing');
    const canceled = await c.predictions.cancel(hanging.id);
    expect(canceled.status).toBe('canceled');

    rep.set({ quota: { status: 402, detail: 'You have insufficient credit to run this model.' } });
    const quota = await c.predictions.create({ model: 'acme/scan', input: { prompt: 'x' } }).catch((e) => e);
    expect(quota.response.status).toBe(402);
    expect(quota.message).toContain('insufficient credit');

    rep.set({});
    const bad = new Replicate({ auth: 'nope', baseUrl: rep.baseUrl });
    const denied = await bad.predictions.create({ model: 'a/b', input: {} }).catch((e) => e);
    expect(denied.response.status).toBe(401);
  });
});

describe('fake OpenAI images, through the openai client', () => {
  const openai = () => new OpenAI({ apiKey: 'sk-test', baseURL: oai.baseUrl, maxRetries: 0 });

  it('generates b64_json with usage', async () => {
    oai.set({});
    const r = await openai().images.generate({ model: 'gpt-image-1', prompt: 'a liver' });
    const png = Buffer.from(r.data?.[0]?.b64_json ?? '', 'base64');
    expect((await sharp(png).metadata()).format).toBe('png');
    expect(r.usage?.input_tokens).toBeGreaterThan(0);
  });

  it('edits a multipart upload', async () => {
    oai.set({});
    const src = await syntheticScanPng({ width: 12, height: 12 });
    const r = await openai().images.edit({
      model: 'gpt-image-1',
      prompt: 'sharpen',
      image: await toFile(src, 'scan.png', { type: 'image/png' }),
    });
    const png = Buffer.from(r.data?.[0]?.b64_json ?? '', 'base64');
    expect((await sharp(png).metadata()).width).toBe(12);
    const last = oai.requests.at(-1);
    expect(last?.path).toBe('/v1/images/edits');
    expect(last?.body.image).toMatchObject({ filename: 'scan.png', type: 'image/png' });
  });

  it('answers quota as 429 insufficient_quota', async () => {
    oai.set({ quota: 'You exceeded your current quota, please check your plan and billing details.' });
    const err = await openai()
      .images.generate({ model: 'gpt-image-1', prompt: 'x' })
      .catch((e) => e);
    expect(err.status).toBe(429);
    expect(err.code).toBe('insufficient_quota');
    oai.set({});
  });
});
