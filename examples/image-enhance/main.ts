/**
 * examples/image-enhance: an ultrasound frame in, a cleaner one out.
 *
 *   AI_SUITE_API_KEY=svc_ai_… pnpm --filter @ai-suite/example-image-enhance start -- scan.png
 *
 * Sends the image (a path, or an http(s) URL the server fetches) to `client.images.edit` with
 * `profile: "ultrasound"`: the model's edit, then the server's enhancement (speckle reduction,
 * normalisation, local contrast, PNG). Without an image it first makes one with
 * `client.images.generate`, so the example runs with nothing at hand. Saves the PNGs into
 * OUT_DIR (default `./out`) with the result's `save()`, which works whether the server returned
 * the image inline or stored it (`--store`) and returned signed URLs.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { AiSuite, type ImageResult } from '@ai-suite/sdk';

export interface EnhanceOptions {
  client: AiSuite;
  /** A path or an http(s) URL; when absent, a scan is generated first. */
  image?: string;
  /** `replicate` (the server's default) or `openai` (the alternative provider). */
  provider?: 'replicate' | 'openai';
  /** An image model id of the workspace's catalog (default: the profile's, as the server decides). */
  model?: string;
  /** Keep the raw and processed images as storage files (default: as the server decides). */
  store?: boolean;
  /** Where the PNGs are written (default `./out`). */
  outDir?: string;
  log?: (line: string) => void;
}

export interface SavedImage {
  path: string;
  bytes: number;
  width: number;
  height: number;
}

/** Width and height from a PNG's IHDR chunk (the server always answers PNG). */
export function pngSize(png: Uint8Array): { width: number; height: number } {
  const sig = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  if (png.length < 24 || sig.some((b, i) => png[i] !== b)) throw new Error('Not a PNG');
  const view = new DataView(png.buffer, png.byteOffset, png.byteLength);
  return { width: view.getUint32(16), height: view.getUint32(20) };
}

async function save(result: ImageResult, file: string): Promise<SavedImage> {
  const bytes = await result.bytes();
  await result.save(file);
  return { path: file, bytes: bytes.length, ...pngSize(bytes) };
}

const usd = (micros: number) => `$${(micros / 1e6).toFixed(4)}`;

export async function enhanceImage(opts: EnhanceOptions) {
  const { client } = opts;
  const log = opts.log ?? (() => {});
  const outDir = opts.outDir ?? path.resolve('out');
  await fs.mkdir(outDir, { recursive: true });
  const common = {
    ...(opts.provider ? { provider: opts.provider } : {}),
    ...(opts.model ? { model: opts.model } : {}),
    ...(opts.store !== undefined ? { store: opts.store } : {}),
  };

  let source: string | URL;
  let name: string;
  let generated: SavedImage | undefined;
  if (opts.image) {
    source = /^https?:\/\//.test(opts.image) ? new URL(opts.image) : path.resolve(opts.image);
    name = path.basename(opts.image).replace(/\.[^.]*$/, '') || 'image';
  } else {
    // Generation runs on Replicate (the alternative provider only serves the profile).
    const scan = await client.images.generate({
      prompt: 'A B-mode ultrasound scan of a liver with a small round cyst, grainy speckle, low contrast',
      ...(common.store !== undefined ? { store: common.store } : {}),
    });
    generated = await save(scan, path.join(outDir, 'scan.png'));
    source = generated.path;
    name = 'scan';
    log(
      `generated ${path.basename(generated.path)} (${generated.bytes} bytes, ${generated.width}×${generated.height}) ` +
        `with ${scan.model} on ${scan.provider}, ${usd(scan.costMicros)}`,
    );
  }

  const result = await client.images.edit({ image: source, profile: 'ultrasound', ...common });
  log(
    `enhanced with profile ${result.profile}: ${result.model} on ${result.provider}, ` +
      `${result.tokensUsed} tokens, ${usd(result.costMicros)}`,
  );
  if (result.raw_image_id)
    log(`stored: raw image ${result.raw_image_id}, processed ${result.processed_run_id}`);
  const enhanced = await save(result, path.join(outDir, `${name}-enhanced.png`));
  log(
    `saved ${path.basename(enhanced.path)} (${enhanced.bytes} bytes, ${enhanced.width}×${enhanced.height} PNG)`,
  );
  return { generated, enhanced, result };
}

const isMain =
  process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname);
if (isMain) {
  // pnpm passes a `--` through (`pnpm … start -- scan.png --provider openai`), and parseArgs
  // would take every option after it for a positional: a leading one is dropped.
  const args = process.argv.slice(2);
  const { values, positionals } = parseArgs({
    args: args[0] === '--' ? args.slice(1) : args,
    allowPositionals: true,
    options: {
      provider: { type: 'string' },
      model: { type: 'string' },
      store: { type: 'boolean' },
    },
  });
  const provider = values.provider;
  if (provider !== undefined && provider !== 'replicate' && provider !== 'openai') {
    console.error('--provider is replicate or openai');
    process.exit(2);
  }
  enhanceImage({
    client: new AiSuite(),
    image: positionals[0],
    provider,
    model: values.model,
    store: values.store,
    outDir: process.env.OUT_DIR,
    log: (l) => console.log(l),
  }).then(
    (r) => console.log(r.enhanced.path),
    (err) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
