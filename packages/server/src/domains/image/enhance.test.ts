import { syntheticScanPixels, syntheticScanPng } from '@ai-suite/testkit';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { enhanceUltrasound, imageJobs, toPng } from './enhance.js';

const LIMITS = { concurrency: 2, timeoutSeconds: 20 };

const W = 128;
const H = 128;

/** Grey levels of a PNG, one byte per pixel. */
async function grey(png: Buffer) {
  const { data, info } = await sharp(png).greyscale().raw().toBuffer({ resolveWithObject: true });
  return { data, width: info.width, height: info.height };
}

/** Mean and standard deviation of the pixels of a rectangle. */
function stats(img: { data: Buffer; width: number }, x0: number, y0: number, w: number, h: number) {
  let sum = 0;
  let sq = 0;
  for (let y = y0; y < y0 + h; y++)
    for (let x = x0; x < x0 + w; x++) {
      const v = img.data[y * img.width + x] as number;
      sum += v;
      sq += v * v;
    }
  const n = w * h;
  const mean = sum / n;
  return { mean, sd: Math.sqrt(Math.max(0, sq / n - mean * mean)) };
}

// A flat stretch of "tissue" near the top (no cyst, little depth fall-off) and the cyst centre.
const TISSUE = [8, 8, 40, 16] as const;
const CYST = [W / 2 - 8, Math.round(H * 0.55) - 8, 16, 16] as const;

describe('ultrasound enhancement, measured on a synthetic speckled scan', () => {
  it('reduces speckle in flat tissue, raises contrast, and writes a PNG of the same size', async () => {
    const noisy = await syntheticScanPng({ width: W, height: H, seed: 7, speckle: 0.6 });
    const out = await enhanceUltrasound(noisy, { maxPixels: 10_000_000, ...LIMITS });

    const meta = await sharp(out).metadata();
    expect([meta.format, meta.width, meta.height]).toEqual(['png', W, H]);

    const before = await grey(noisy);
    const after = await grey(out);
    const tb = stats(before, ...TISSUE);
    const ta = stats(after, ...TISSUE);
    const cb = stats(before, ...CYST);
    const ca = stats(after, ...CYST);
    // Speckle: the spread of grey levels inside uniform tissue falls, although the grey range
    // as a whole was stretched (so the drop is not a matter of scale).
    expect(ta.sd).toBeLessThan(tb.sd * 0.6);
    // Contrast: tissue and cyst lie further apart, and much further in units of the noise
    // (contrast-to-noise ratio).
    expect(ta.mean - ca.mean).toBeGreaterThan((tb.mean - cb.mean) * 1.3);
    const cnr = (t: { mean: number; sd: number }, c: { mean: number }) => (t.mean - c.mean) / t.sd;
    expect(cnr(ta, ca)).toBeGreaterThan(cnr(tb, cb) * 2.5);
  });

  it('the unprocessed frame is what the numbers above start from (speckle present, low contrast)', () => {
    const { data, width } = syntheticScanPixels({ width: W, height: H, seed: 7, speckle: 0.6 });
    const t = stats({ data, width }, ...TISSUE);
    expect(t.sd / t.mean).toBeGreaterThan(0.2);
  });

  it('refuses an image over the pixel limit before decoding it', async () => {
    const big = await sharp({ create: { width: 300, height: 300, channels: 3, background: '#000' } })
      .png()
      .toBuffer();
    await expect(enhanceUltrasound(big, { maxPixels: 10_000, ...LIMITS })).rejects.toThrow(/pixel limit/i);
  });

  it('stops a pipeline that runs past its time: sharp aborts it and the call fails', async () => {
    const noise = await sharp({
      create: {
        width: 2500,
        height: 2500,
        channels: 3,
        background: '#777',
        noise: { type: 'gaussian', mean: 128, sigma: 40 },
      },
    })
      .png()
      .toBuffer();
    // A median over 61×61 windows of 6 megapixels takes minutes; the bound is one second.
    await expect(
      enhanceUltrasound(noise, { maxPixels: 10_000_000, medianSize: 61, concurrency: 2, timeoutSeconds: 1 }),
    ).rejects.toThrow(/timeout/i);
  });
});

describe('image work on the shared thread pool', () => {
  it('runs at most `concurrency` pipelines at once in the process; the others wait their turn', async () => {
    const png = await sharp({ create: { width: 400, height: 400, channels: 3, background: '#345' } })
      .png()
      .toBuffer();
    const limits = { concurrency: 1, timeoutSeconds: 20 };
    const jobs = [
      toPng(png, 1_000_000, limits),
      toPng(png, 1_000_000, limits),
      toPng(png, 1_000_000, limits),
    ];
    expect(imageJobs()).toEqual({ active: 1, waiting: 2 });
    const out = await Promise.all(jobs);
    expect(out.every((b) => b.subarray(1, 4).toString() === 'PNG')).toBe(true);
    expect(imageJobs()).toEqual({ active: 0, waiting: 0 });
  });
});
