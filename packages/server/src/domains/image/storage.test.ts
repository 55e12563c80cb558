import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { syntheticScanPng } from '@ai-suite/testkit';
import S3rver from 's3rver';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestWorkspace, creditBalance, type TestWorkspace } from '../../test/harness.js';
import type { StorageFileDto } from '../storage/schema.js';
import { type ImageTestServer, startImageTestServer } from './test-helpers.js';

/** Storing raw and processed images, on the local store and on S3 (s3rver on loopback). */
function storageSuite(
  name: string,
  setup: () => Promise<{ ts: ImageTestServer; close(): Promise<void> }>,
  defaultStores: boolean,
) {
  describe(name, () => {
    let ctx: { ts: ImageTestServer; close(): Promise<void> };
    let ts: ImageTestServer;
    let ws: TestWorkspace;
    let scan: Buffer;
    beforeAll(async () => {
      ctx = await setup();
      ts = ctx.ts;
      ws = await createTestWorkspace(ts, { creditsUsd: '5' });
      scan = await syntheticScanPng({ width: 80, height: 60, seed: 9, speckle: 0.6 });
    });
    afterAll(() => ctx?.close());

    const post = (json: unknown, key = ws.apiKey) => ts.api('/image', { method: 'POST', key, json });

    it(`stores by default: ${defaultStores}`, async () => {
      const res = await post({ prompt: 'a liver' });
      expect(res.status).toBe(200);
      const body = await res.json();
      if (defaultStores) {
        expect(body.image).toBeUndefined();
        expect(body.processed_run_id).toEqual(expect.any(String));
      } else {
        expect(body.image).toEqual(expect.any(String));
        expect(body.raw_image_id).toBeUndefined();
      }
    });

    it('stores raw and processed images as storage files of type image, listed and readable', async () => {
      const res = await post({ profile: 'ultrasound', image: scan.toString('base64'), store: true });
      expect(res.status).toBe(200);
      const body = await res.json();
      expect(body).toMatchObject({
        raw_image_id: expect.any(String),
        processed_run_id: expect.any(String),
        raw_url: expect.stringMatching(/^http/),
        processed_url: expect.stringMatching(/^http/),
        request_id: res.headers.get('x-request-id'),
      });
      expect(body.image).toBeUndefined();

      // The raw file is the source exactly as sent; the processed one the enhanced PNG.
      const raw = await fetch(body.raw_url);
      expect(raw.status).toBe(200);
      expect(Buffer.from(await raw.arrayBuffer()).equals(scan)).toBe(true);
      const processed = await fetch(body.processed_url);
      expect(processed.headers.get('content-type')).toBe('image/png');
      const meta = await sharp(Buffer.from(await processed.arrayBuffer())).metadata();
      expect([meta.format, meta.width, meta.height]).toEqual(['png', 80, 60]);

      const list = await ts.api(`/workspaces/${ws.workspaceId}/storage?type=images`, { key: ws.apiKey });
      const files = ((await list.json()) as { files: StorageFileDto[] }).files;
      const raw2 = files.find((f) => f.id === body.raw_image_id);
      const proc2 = files.find((f) => f.id === body.processed_run_id);
      expect(raw2).toMatchObject({ type: 'image', mimeType: 'image/png', sourceId: body.request_id });
      expect(proc2).toMatchObject({ type: 'image', mimeType: 'image/png', sourceId: body.request_id });
      expect(raw2?.source).toMatch(/raw/);
      expect(proc2?.source).toMatch(/processed/);

      const content = await ts.api(
        `/workspaces/${ws.workspaceId}/storage/content?fileId=${body.processed_run_id}&fileType=image`,
        { key: ws.apiKey },
      );
      expect(content.status).toBe(200);
      expect(content.headers.get('content-type')).toBe('image/png');
    });

    it('re-runs the enhancement on a stored raw image (raw_image_id), which another workspace cannot use', async () => {
      const first = await (
        await post({ profile: 'ultrasound', image: scan.toString('base64'), store: true })
      ).json();
      const again = await post({ profile: 'ultrasound', raw_image_id: first.raw_image_id, store: true });
      expect(again.status).toBe(200);
      const body = await again.json();
      expect(body.raw_image_id).toBe(first.raw_image_id);
      expect(body.processed_run_id).not.toBe(first.processed_run_id);
      const p = [...ts.replicate.predictions.values()].at(-1);
      expect(String(p?.input.image)).toBe(`data:image/png;base64,${scan.toString('base64')}`);

      const other = await createTestWorkspace(ts, { creditsUsd: '5' });
      const before = await creditBalance(ts, other.workspaceId);
      const calls = ts.replicate.requests.length;
      const stolen = await post({ profile: 'ultrasound', raw_image_id: first.raw_image_id }, other.apiKey);
      expect(stolen.status).toBe(404);
      expect(await stolen.json()).toEqual({ error: 'File not found' });
      expect(await creditBalance(ts, other.workspaceId)).toBe(before);
      expect(ts.replicate.requests.length).toBe(calls);
    });

    it('store: false answers the base64 PNG and stores nothing', async () => {
      const count = async () =>
        (
          (await (
            await ts.api(`/workspaces/${ws.workspaceId}/storage?type=images`, { key: ws.apiKey })
          ).json()) as {
            totals: { images: number };
          }
        ).totals.images;
      const before = await count();
      const res = await post({ prompt: 'x', store: false });
      expect((await res.json()).image).toEqual(expect.any(String));
      expect(await count()).toBe(before);
    });
  });
}

storageSuite(
  'image storage on the local object store',
  async () => {
    const ts = await startImageTestServer();
    return { ts, close: () => ts.close() };
  },
  false,
);

storageSuite(
  'image storage on S3 (s3rver)',
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 's3rver-image-'));
    const s3 = new S3rver({
      address: '127.0.0.1',
      port: 0,
      silent: true,
      directory: dir,
      configureBuckets: [{ name: 'images' }],
    });
    const addr = await s3.run();
    const ts = await startImageTestServer({
      env: {
        S3_BUCKET: 'images',
        S3_ENDPOINT: `http://127.0.0.1:${addr.port}`,
        S3_REGION: 'us-east-1',
        S3_ACCESS_KEY_ID: 'S3RVER',
        S3_SECRET_ACCESS_KEY: 'S3RVER',
        S3_FORCE_PATH_STYLE: 'true',
      },
    });
    return {
      ts,
      async close() {
        await ts.close();
        await s3.close();
        fs.rmSync(dir, { recursive: true, force: true });
      },
    };
  },
  true,
);
