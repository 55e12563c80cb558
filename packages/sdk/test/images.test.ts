import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createTestWorkspace, type TestWorkspace } from '@ai-suite/server/test-harness';
import { startHttpFixture, syntheticScanPng } from '@ai-suite/testkit';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// The image test server (fakes of Replicate and OpenAI images) lives beside the server's tests.
import { type ImageTestServer, startImageTestServer } from '../../server/src/domains/image/test-helpers.js';
import { AiSuite, BadRequestError, InsufficientCreditsError, NotFoundError } from '../src/index.js';

let ts: ImageTestServer;
let ws: TestWorkspace;
let client: AiSuite;
let scan: Buffer;
let dir: string;
let site: Awaited<ReturnType<typeof startHttpFixture>>;

beforeAll(async () => {
  ts = await startImageTestServer();
  ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, maxRetries: 0 });
  scan = await syntheticScanPng({ width: 40, height: 30, seed: 2 });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-images-'));
  site = await startHttpFixture(() => ({ headers: { 'content-type': 'image/png' }, body: scan }));
});
afterAll(async () => {
  await site?.close();
  await ts?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const dims = async (b: Uint8Array) => {
  const m = await sharp(b).metadata();
  return [m.format, m.width, m.height];
};

describe('client.images', () => {
  it('info() is the connectivity check', async () => {
    expect((await client.images.info()).profiles).toEqual(['ultrasound']);
  });

  it('generate() returns a typed result whose PNG can be saved', async () => {
    const out = await client.images.generate({ prompt: 'a thyroid' });
    expect(out.operation).toBe('generate');
    expect(out.model).toBe('scan-gen');
    const file = path.join(dir, 'gen.png');
    const n = await out.save(file);
    expect(n).toBe(fs.statSync(file).size);
    expect(await dims(fs.readFileSync(file))).toEqual(['png', 64, 64]);
  });

  it('edit() takes a path, a Buffer, a Blob and a URL', async () => {
    const p = path.join(dir, 'scan.png');
    fs.writeFileSync(p, scan);
    const inputs = [
      p,
      scan,
      new Blob([new Uint8Array(scan)], { type: 'image/png' }),
      new URL(`${site.url.replace('127.0.0.1', 'localhost')}/scan.png`),
    ];
    for (const image of inputs) {
      const out = await client.images.edit({ prompt: 'clean', image });
      expect(out.operation).toBe('edit');
      expect(await dims(await out.bytes())).toEqual(['png', 40, 30]);
    }
  });

  it('the ultrasound profile with storage: signed URLs, save() downloads the processed PNG, rawImageId re-runs', async () => {
    const out = await client.images.edit({ profile: 'ultrasound', image: scan, store: true });
    expect(out.image).toBeUndefined();
    expect(out.raw_image_id).toEqual(expect.any(String));
    const file = path.join(dir, 'processed.png');
    await out.save(file);
    expect(await dims(fs.readFileSync(file))).toEqual(['png', 40, 30]);
    const again = await client.images.edit({
      profile: 'ultrasound',
      image: { rawImageId: out.raw_image_id as string },
      store: true,
    });
    expect(again.raw_image_id).toBe(out.raw_image_id);
  });

  it('throws typed errors', async () => {
    const missing = await client.images
      .edit({ prompt: 'x', image: { rawImageId: '00000000-0000-4000-8000-000000000000' } })
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(NotFoundError);
    const bad = await client.images
      .edit({ prompt: 'x', image: new Uint8Array([1, 2, 3]) })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(BadRequestError);
    expect((bad as BadRequestError).code).toBe('UNSUPPORTED_IMAGE_TYPE');
    const broke = new AiSuite({
      baseURL: ts.url,
      apiKey: (await createTestWorkspace(ts)).apiKey,
      maxRetries: 0,
    });
    expect(await broke.images.generate({ prompt: 'x' }).catch((e: unknown) => e)).toBeInstanceOf(
      InsufficientCreditsError,
    );
  });
});
