import pLimit, { type LimitFunction } from 'p-limit';
import type SharpType from 'sharp';

/** sharp (and libvips) loaded on first use, not at the server's start. */
const loadSharp = async (): Promise<typeof SharpType> => (await import('sharp')).default;

/**
 * The `ultrasound` profile's enhancement pipeline (docs/image.md explains each step):
 *
 * 1. Grey: ultrasound is a single-channel modality; colour from a model is noise here.
 * 2. Speckle reduction: a median filter. Speckle is multiplicative, grainy interference of
 *    coherent echoes; a median removes isolated bright and dark grains while keeping edges (a
 *    mean blur would smear the boundaries a reader measures).
 * 3. Normalisation: stretches the grey levels so the darkest 1 % become black and the brightest
 *    1 % white (sharp's `normalise`), so a washed-out frame uses the whole range.
 * 4. Local contrast: CLAHE (contrast-limited adaptive histogram equalisation) equalises each
 *    tile's histogram with a slope limit, bringing out structure in dim regions without
 *    boosting the remaining noise as plain equalisation would.
 * 5. PNG: lossless, so the result can be measured and re-processed without JPEG artefacts.
 *
 * Each step is its own sharp pipeline: sharp runs the operations of one pipeline in its own
 * fixed order, whatever order they were called in, and this order matters.
 */
export interface EnhanceSettings extends ProcessLimits {
  /** sharp's `limitInputPixels`: larger images are refused before decoding (image bombs). */
  maxPixels: number;
  /** Median window (odd), default 5. */
  medianSize?: number;
}

/**
 * sharp decodes and filters on libuv's thread pool (4 threads unless `UV_THREADPOOL_SIZE`),
 * which DNS lookups, file reads, zlib and password hashing share: pipelines of every request of
 * the process wait here for one of `concurrency` slots, so image work never holds the whole
 * pool; each pipeline is stopped by sharp after `timeoutSeconds`.
 */
export interface ProcessLimits {
  concurrency: number;
  timeoutSeconds: number;
}

let gate: { limit: LimitFunction; concurrency: number } | undefined;
function slot<T>(limits: ProcessLimits, fn: () => Promise<T>): Promise<T> {
  if (!gate || gate.concurrency !== limits.concurrency) {
    gate = { limit: pLimit(limits.concurrency), concurrency: limits.concurrency };
  }
  return gate.limit(fn);
}

/** Pipelines running and waiting for a slot (observability and tests). */
export const imageJobs = () => ({
  active: gate?.limit.activeCount ?? 0,
  waiting: gate?.limit.pendingCount ?? 0,
});

export function enhanceUltrasound(input: Buffer, settings: EnhanceSettings): Promise<Buffer> {
  return slot(settings, () => enhance(input, settings));
}

async function enhance(input: Buffer, settings: EnhanceSettings): Promise<Buffer> {
  const sharp = await loadSharp();
  const timeout = { seconds: settings.timeoutSeconds };
  const opts = { limitInputPixels: settings.maxPixels, sequentialRead: true };
  const grey = await sharp(input, opts)
    .timeout(timeout)
    .rotate()
    .greyscale()
    .toColourspace('b-w')
    .raw()
    .toBuffer({ resolveWithObject: true });
  const raw = { raw: { width: grey.info.width, height: grey.info.height, channels: grey.info.channels } };
  // Every stage ends in `b-w`: raw output otherwise comes back as three sRGB channels.
  const despeckled = await sharp(grey.data, raw)
    .timeout(timeout)
    .median(settings.medianSize ?? 5)
    .toColourspace('b-w')
    .raw()
    .toBuffer();
  const normalised = await sharp(despeckled, raw)
    .timeout(timeout)
    .normalise({ lower: 1, upper: 99 })
    .toColourspace('b-w')
    .raw()
    .toBuffer();
  // Tiles of a quarter of the frame and a slope limit of 2: local enough to lift dim regions,
  // coarse and limited enough not to re-amplify the grain the median left.
  const tile = Math.max(3, Math.round(Math.min(grey.info.width, grey.info.height) / 4));
  return sharp(normalised, raw)
    .timeout(timeout)
    .clahe({ width: tile, height: tile, maxSlope: 2 })
    .toColourspace('b-w')
    .png({ compressionLevel: 9 })
    .toBuffer();
}

/** Any accepted image as PNG (the response's `image`, the processed file without a profile). */
export function toPng(input: Buffer, maxPixels: number, limits: ProcessLimits): Promise<Buffer> {
  return slot(limits, async () => {
    const sharp = await loadSharp();
    return sharp(input, { limitInputPixels: maxPixels, sequentialRead: true })
      .timeout({ seconds: limits.timeoutSeconds })
      .rotate()
      .png()
      .toBuffer();
  });
}
