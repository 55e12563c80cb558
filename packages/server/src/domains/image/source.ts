import type SharpType from 'sharp';
import { appError } from '../../errors/index.js';
import { OutboundBlockedError, type OutboundPolicy, outboundRequest } from '../agents/outbound.js';

/** sharp (and libvips) loaded on first use, not at the server's start. */
const loadSharp = async (): Promise<typeof SharpType> => (await import('sharp')).default;

/** The formats a source image may have, told by their first bytes (the declared type is not trusted). */
export type ImageMime = 'image/png' | 'image/jpeg' | 'image/webp' | 'image/gif';

export function sniffImage(b: Buffer): ImageMime | undefined {
  if (
    b.length >= 8 &&
    b.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))
  ) {
    return 'image/png';
  }
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'image/jpeg';
  if (b.length >= 12 && b.toString('latin1', 0, 4) === 'RIFF' && b.toString('latin1', 8, 12) === 'WEBP') {
    return 'image/webp';
  }
  if (b.length >= 6 && /^GIF8[79]a$/.test(b.toString('latin1', 0, 6))) return 'image/gif';
  return undefined;
}

export interface SourceLimits {
  maxBytes: number;
  maxPixels: number;
}

export const tooLarge = (maxBytes: number) =>
  appError('IMAGE_TOO_LARGE', { maxBytes, details: { maxBytes } });

const unsupported = (detected?: string) =>
  appError('UNSUPPORTED_IMAGE_TYPE', {
    details: {
      ...(detected ? { declaredContentType: detected } : {}),
    },
  });

/**
 * Checks source bytes: a known image format by magic bytes, a header sharp can read, and
 * dimensions within `maxPixels` (an image bomb declares huge dimensions in a tiny file; it is
 * refused from its header, before any pixel is decoded).
 */
export async function checkImage(
  bytes: Buffer,
  limits: SourceLimits,
  declared?: string,
): Promise<{ bytes: Buffer; mimeType: ImageMime; width: number; height: number }> {
  if (bytes.length > limits.maxBytes) {
    throw tooLarge(limits.maxBytes);
  }
  const mimeType = sniffImage(bytes);
  if (!mimeType) throw unsupported(declared);
  const sharp = await loadSharp();
  let meta: Awaited<ReturnType<ReturnType<typeof sharp>['metadata']>>;
  try {
    meta = await sharp(bytes, { limitInputPixels: false }).metadata();
  } catch {
    throw appError('IMAGE_UNREADABLE');
  }
  const width = meta.width ?? 0;
  const height = meta.height ?? 0;
  if (!width || !height) throw appError('IMAGE_UNREADABLE');
  if (width * height > limits.maxPixels) {
    throw appError('IMAGE_TOO_MANY_PIXELS', {
      width,
      height,
      maxPixels: limits.maxPixels,
      details: {
        width,
        height,
        maxPixels: limits.maxPixels,
      },
    });
  }
  return { bytes, mimeType, width, height };
}

/** `image`: base64, with or without a `data:<type>;base64,` prefix. */
export function decodeBase64Image(value: string, maxBytes: number): Buffer {
  let data = value.trim();
  const m = /^data:([^;,]*)(;base64)?,/i.exec(data);
  if (m) {
    if (!m[2]) throw appError('IMAGE_DATA_URI_NOT_BASE64');
    data = data.slice(m[0].length);
  }
  data = data.replace(/\s+/g, '');
  // Refused from its length, before decoding: 4 characters carry 3 bytes.
  if (Math.floor((data.length * 3) / 4) - 2 > maxBytes) {
    throw tooLarge(maxBytes);
  }
  if (data.length === 0 || !/^[A-Za-z0-9+/_-]+={0,2}$/.test(data)) {
    throw appError('IMAGE_NOT_BASE64');
  }
  return Buffer.from(data, 'base64');
}

export interface UrlFetchLimits extends SourceLimits {
  timeoutMs: number;
  maxRedirects: number;
  policy: OutboundPolicy;
}

/**
 * `image_url`: fetched through the SSRF guard (every hop of a redirect is checked, and the
 * connection is made to the address that was checked), with a time, size and redirect limit.
 */
export async function fetchImageUrl(raw: string, limits: UrlFetchLimits, signal?: AbortSignal) {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw appError('IMAGE_URL_NOT_HTTP');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw appError('IMAGE_URL_NOT_HTTP');
  }
  let res: Awaited<ReturnType<typeof outboundRequest>>;
  try {
    res = await outboundRequest(url.toString(), {
      policy: limits.policy,
      timeoutMs: limits.timeoutMs,
      maxBytes: limits.maxBytes,
      maxRedirects: limits.maxRedirects,
      headers: { accept: 'image/png,image/jpeg,image/webp,image/gif', 'user-agent': 'AI-Suite-Image/1.0' },
      signal,
    });
  } catch (err) {
    if (err instanceof OutboundBlockedError || (err as Error).name === 'OutboundBlockedError') {
      throw appError('IMAGE_URL_NOT_ALLOWED', { message: (err as Error).message });
    }
    const msg = (err as Error).message;
    if (msg === 'Too many redirects') {
      throw appError('IMAGE_FETCH_TOO_MANY_REDIRECTS', { maxRedirects: limits.maxRedirects });
    }
    throw appError('IMAGE_FETCH_FAILED', { msg });
  }
  if (res.status >= 300 && res.status < 400) {
    throw appError('IMAGE_FETCH_REDIRECT_WITHOUT_LOCATION');
  }
  if (res.status !== 200) {
    throw appError('IMAGE_FETCH_HTTP_ERROR', {
      status: res.status,
      details: {
        status: res.status,
      },
    });
  }
  if (res.truncated) throw tooLarge(limits.maxBytes);
  const declared = String(res.headers['content-type'] ?? '');
  return checkImage(res.body, limits, declared || undefined);
}
