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
export interface EnhanceSettings {
  /** sharp's `limitInputPixels`: larger images are refused before decoding (image bombs). */
  maxPixels: number;
  /** Median window (odd), default 5. */
  medianSize?: number;
}

export async function enhanceUltrasound(input: Buffer, settings: EnhanceSettings): Promise<Buffer> {
  const sharp = await loadSharp();
  const opts = { limitInputPixels: settings.maxPixels };
  const grey = await sharp(input, opts).rotate().greyscale().toColourspace('b-w').raw().toBuffer({
    resolveWithObject: true,
  });
  const raw = { raw: { width: grey.info.width, height: grey.info.height, channels: grey.info.channels } };
  // Every stage ends in `b-w`: raw output otherwise comes back as three sRGB channels.
  const despeckled = await sharp(grey.data, raw)
    .median(settings.medianSize ?? 5)
    .toColourspace('b-w')
    .raw()
    .toBuffer();
  const normalised = await sharp(despeckled, raw)
    .normalise({ lower: 1, upper: 99 })
    .toColourspace('b-w')
    .raw()
    .toBuffer();
  // Tiles of a quarter of the frame and a slope limit of 2: local enough to lift dim regions,
  // coarse and limited enough not to re-amplify the grain the median left.
  const tile = Math.max(3, Math.round(Math.min(grey.info.width, grey.info.height) / 4));
  return sharp(normalised, raw)
    .clahe({ width: tile, height: tile, maxSlope: 2 })
    .toColourspace('b-w')
    .png({ compressionLevel: 9 })
    .toBuffer();
}

/** Any accepted image as PNG (the response's `image`, the processed file without a profile). */
export async function toPng(input: Buffer, maxPixels: number): Promise<Buffer> {
  const sharp = await loadSharp();
  return sharp(input, { limitInputPixels: maxPixels }).rotate().png().toBuffer();
}
