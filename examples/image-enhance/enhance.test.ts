import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AiSuite } from '@ai-suite/sdk';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '@ai-suite/server/test-harness';
import {
  type FakeOpenAIImages,
  type FakeReplicate,
  startFakeOpenAIImages,
  startFakeReplicate,
  syntheticScanPng,
} from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enhanceImage, pngSize } from './main.js';

let replicate: FakeReplicate;
let openai: FakeOpenAIImages;
let ts: TestServer;
let ws: TestWorkspace;
let outDir: string;
const client = () => new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey });

beforeAll(async () => {
  replicate = await startFakeReplicate({ token: 'r8_example' });
  openai = await startFakeOpenAIImages({ apiKey: 'sk-example' });
  ts = await startTestServer({
    env: {
      REPLICATE_BASE_URL: replicate.baseUrl,
      REPLICATE_API_TOKEN: 'r8_example',
      IMAGE_MODEL: 'acme/scan-enhancer',
      IMAGE_MODEL_PRICE_PER_IMAGE: '0.01',
      IMAGE_ALT_BASE_URL: openai.baseUrl,
      IMAGE_ALT_API_KEY: 'sk-example',
      IMAGE_ALT_MODEL: 'gpt-image-1',
      IMAGE_ALT_MODEL_PRICE_PER_IMAGE: '0.02',
    },
  });
  ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'image-enhance-'));
});
afterAll(async () => {
  await ts?.close();
  await replicate?.close();
  await openai?.close();
  fs.rmSync(outDir, { recursive: true, force: true });
});

describe('examples/image-enhance', () => {
  it('without an image: generates a scan, then enhances it with the ultrasound profile on Replicate', async () => {
    const lines: string[] = [];
    const before = replicate.predictions.size;
    const r = await enhanceImage({ client: client(), outDir, log: (l) => lines.push(l) });
    // One generation and one edit reached the fake, the edit carrying the generated scan.
    const created = [...replicate.predictions.values()].slice(before);
    expect(created).toHaveLength(2);
    expect(created[0]?.input.image).toBeUndefined();
    expect(String(created[1]?.input.image)).toMatch(/^data:image\/png;base64,/);
    expect(String(created[1]?.input.prompt)).toContain('ultrasound');

    expect(r.result).toMatchObject({ operation: 'edit', profile: 'ultrasound', provider: 'replicate' });
    expect(r.result.costMicros).toBe(10_000);
    const scan = fs.readFileSync(path.join(outDir, 'scan.png'));
    const enhanced = fs.readFileSync(path.join(outDir, 'scan-enhanced.png'));
    expect(pngSize(scan)).toEqual({ width: 64, height: 64 });
    expect(pngSize(enhanced)).toEqual({ width: 64, height: 64 });
    expect(enhanced.equals(scan)).toBe(false);
    expect(r.enhanced).toEqual({
      path: path.join(outDir, 'scan-enhanced.png'),
      bytes: enhanced.length,
      width: 64,
      height: 64,
    });
    expect(lines[0]).toMatch(
      /^generated scan\.png \(\d+ bytes, 64×64\) with acme\/scan-enhancer on replicate, \$0\.0100$/,
    );
    expect(lines).toContain(`saved scan-enhanced.png (${enhanced.length} bytes, 64×64 PNG)`);
  });

  it('a file on disk, on the alternative provider, stored: saved from the signed URL', async () => {
    const input = path.join(outDir, 'liver.png');
    fs.writeFileSync(input, await syntheticScanPng({ width: 80, height: 48, seed: 7 }));
    const lines: string[] = [];
    const r = await enhanceImage({
      client: client(),
      image: input,
      provider: 'openai',
      store: true,
      outDir,
      log: (l) => lines.push(l),
    });
    expect(r.generated).toBeUndefined();
    expect(openai.requests.at(-1)?.path).toBe('/v1/images/edits');
    expect(r.result).toMatchObject({ provider: 'openai', model: 'gpt-image-1', profile: 'ultrasound' });
    expect(r.result.image).toBeUndefined();
    expect(r.result.processed_url).toMatch(/^http/);
    expect(r.result.tokensUsed).toBeGreaterThan(0);
    expect(lines).toContain(
      `stored: raw image ${r.result.raw_image_id}, processed ${r.result.processed_run_id}`,
    );
    const enhanced = fs.readFileSync(path.join(outDir, 'liver-enhanced.png'));
    expect(pngSize(enhanced)).toEqual({ width: 80, height: 48 });
    expect(r.enhanced.bytes).toBe(enhanced.length);
  });

  it('a URL the server may not fetch is refused before any provider call, and costs nothing', async () => {
    const before = replicate.predictions.size;
    await expect(
      enhanceImage({ client: client(), image: 'http://127.0.0.1:1/scan.png', outDir }),
    ).rejects.toMatchObject({ status: 400, code: 'URL_NOT_ALLOWED' });
    expect(replicate.predictions.size).toBe(before);
  });
});
