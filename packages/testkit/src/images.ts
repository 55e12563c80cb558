import sharp from 'sharp';

/** A small seeded PRNG (mulberry32): the same seed gives the same image on every machine. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A 32-bit seed from any text (FNV-1a), so a prompt always draws the same picture. */
export function seedOf(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export interface SyntheticScanOptions {
  width?: number;
  height?: number;
  seed?: number;
  /** Strength of the multiplicative speckle, 0 (none) to 1 (default 0.5). */
  speckle?: number;
  /** Grey levels the tissue spans (low contrast: a narrow band, default 70..150). */
  low?: number;
  high?: number;
}

/**
 * The grey levels of a synthetic ultrasound-like frame: a dark background, a fan of brighter
 * "tissue" with a round darker "cyst", squeezed into a narrow band of grey levels (low contrast)
 * and multiplied by speckle noise (Rayleigh-like, as coherent imaging produces). Single channel,
 * row-major. Used by the fake image providers and by the tests that measure the enhancement.
 */
export function syntheticScanPixels(opts: SyntheticScanOptions = {}): {
  width: number;
  height: number;
  data: Buffer;
} {
  const width = opts.width ?? 96;
  const height = opts.height ?? 96;
  const rnd = prng(opts.seed ?? 1);
  const speckle = opts.speckle ?? 0.5;
  const low = opts.low ?? 70;
  const high = opts.high ?? 150;
  const data = Buffer.alloc(width * height);
  const cx = width / 2;
  const cy = height * 0.55;
  const r = Math.min(width, height) * 0.18;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      // Tissue brightness falls off with depth; the cyst is darker.
      let v = low + (high - low) * (1 - (0.6 * y) / height);
      if ((x - cx) ** 2 + (y - cy) ** 2 < r * r) v = low + (high - low) * 0.15;
      // Rayleigh speckle with mean 1: sqrt(-2 ln U) / sqrt(pi/2).
      const u = Math.max(1e-6, rnd());
      const rayleigh = Math.sqrt(-2 * Math.log(u)) / 1.2533;
      v *= 1 - speckle + speckle * rayleigh;
      data[y * width + x] = Math.max(0, Math.min(255, Math.round(v)));
    }
  }
  return { width, height, data };
}

/** The synthetic frame as a PNG (greyscale). */
export async function syntheticScanPng(opts: SyntheticScanOptions = {}): Promise<Buffer> {
  const { width, height, data } = syntheticScanPixels(opts);
  return sharp(data, { raw: { width, height, channels: 1 } })
    .png()
    .toBuffer();
}

/**
 * What the fake providers answer for an edit: the source image, decoded whatever its format,
 * turned to grey and brightened a little, as PNG. Deterministic, and visibly "edited".
 */
export async function fakeEdit(source: Buffer): Promise<Buffer> {
  return sharp(source, { limitInputPixels: 4096 * 4096 })
    .greyscale()
    .linear(1.05, 4)
    .png()
    .toBuffer();
}

/** Parses a `data:<mime>;base64,<data>` URI; undefined when `s` is not one. */
export function parseDataUri(s: string): { mime: string; bytes: Buffer } | undefined {
  const m = /^data:([^;,]+)?(;base64)?,(.*)$/s.exec(s);
  if (!m) return undefined;
  const bytes = m[2] ? Buffer.from(m[3] ?? '', 'base64') : Buffer.from(decodeURIComponent(m[3] ?? ''));
  return { mime: m[1] ?? 'text/plain', bytes };
}
