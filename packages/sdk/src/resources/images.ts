import type { AiSuite } from '../client.js';
import { APIPromise } from '../core/api-promise.js';
import type { ImageRequest, ImageResponse } from './types.js';

/**
 * A source image for `images.edit`:
 * - a `URL` object: sent as `image_url`, fetched by the server (through its SSRF guard);
 * - a string: a path to a file (Node), or a `data:image/…;base64,` URI sent as is;
 * - bytes (`Uint8Array` / `Buffer`) or a `Blob` / `File`: sent as base64;
 * - `{ rawImageId }`: an image stored by an earlier call (re-runs the enhancement on it).
 */
export type ImageInput = URL | string | Uint8Array | Blob | { filePath: string } | { rawImageId: string };

type Common = Omit<ImageRequest, 'image' | 'image_url' | 'raw_image_id' | 'operation'>;
export type ImageGenerateParams = Common;
export type ImageEditParams = Common & { image: ImageInput };

/** The typed result, with helpers to get the PNG whether it came inline or was stored. */
export interface ImageResult extends ImageResponse {
  /** The processed PNG: decoded from `image`, or downloaded from `processed_url` (signed, 15 minutes). */
  bytes(): Promise<Uint8Array>;
  /** Writes the processed PNG to `path` (Node); resolves with the number of bytes written. */
  save(path: string): Promise<number>;
}

interface Opts {
  signal?: AbortSignal;
}

const NODE_FS = 'node:fs/promises';
const nodeFs = () => import(/* @vite-ignore */ NODE_FS) as Promise<typeof import('node:fs/promises')>;

function toBase64(bytes: Uint8Array): string {
  const B = (globalThis as { Buffer?: { from(b: Uint8Array): { toString(enc: string): string } } }).Buffer;
  if (B) return B.from(bytes).toString('base64');
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function fromBase64(b64: string): Uint8Array {
  const B = (globalThis as { Buffer?: { from(s: string, enc: string): Uint8Array } }).Buffer;
  if (B) return new Uint8Array(B.from(b64, 'base64'));
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

/** The request fields for one source. */
async function sourceFields(
  image: ImageInput,
): Promise<Pick<ImageRequest, 'image' | 'image_url' | 'raw_image_id'>> {
  if (image instanceof URL) return { image_url: image.toString() };
  if (typeof image === 'string') {
    if (image.startsWith('data:')) return { image };
    return { image: toBase64(new Uint8Array(await (await nodeFs()).readFile(image))) };
  }
  if (image instanceof Uint8Array) return { image: toBase64(image) };
  if (typeof Blob !== 'undefined' && image instanceof Blob) {
    return { image: toBase64(new Uint8Array(await image.arrayBuffer())) };
  }
  if ('rawImageId' in image) return { raw_image_id: image.rawImageId };
  if ('filePath' in image)
    return { image: toBase64(new Uint8Array(await (await nodeFs()).readFile(image.filePath))) };
  throw new TypeError('image must be a URL, a path, bytes, a Blob, { filePath } or { rawImageId }');
}

function withHelpers(data: ImageResponse): ImageResult {
  const bytes = async (): Promise<Uint8Array> => {
    if (data.image) return fromBase64(data.image);
    if (!data.processed_url) throw new Error('The result carries neither image nor processed_url');
    const res = await fetch(data.processed_url);
    if (!res.ok) throw new Error(`Downloading the processed image failed: HTTP ${res.status}`);
    return new Uint8Array(await res.arrayBuffer());
  };
  return Object.assign(Object.create(null), data, {
    bytes,
    async save(path: string) {
      const b = await bytes();
      await (await nodeFs()).writeFile(path, b);
      return b.length;
    },
  }) as ImageResult;
}

/**
 * Image generation and editing (spec 4.9). Credit-metered per image; the `ultrasound` profile
 * enhances the result (speckle reduction, contrast, PNG). With `store` (default: as the server
 * decides) the raw and processed images become storage files and the result carries signed URLs
 * instead of `image`.
 */
export class Images {
  constructor(private readonly client: AiSuite) {}

  /** Text to image. */
  generate(params: ImageGenerateParams, opts: Opts = {}): APIPromise<ImageResult> {
    return this.send({ ...params, operation: 'generate' }, opts);
  }

  /** Edits a source image (path, bytes, Blob, URL or a stored raw image). */
  edit(params: ImageEditParams, opts: Opts = {}): APIPromise<ImageResult> {
    const { image, ...rest } = params;
    return new APIPromise(
      sourceFields(image).then((src) =>
        this.send({ ...rest, ...src, operation: 'edit' }, opts).withResponse(),
      ),
    );
  }

  /** The connectivity check: `{ message, endpoint, methods, profiles }`. */
  info(
    opts: Opts = {},
  ): APIPromise<{ message: string; endpoint: string; methods: string[]; profiles: string[] }> {
    return this.client.request({ method: 'GET', path: '/image', ...opts });
  }

  private send(body: ImageRequest, opts: Opts): APIPromise<ImageResult> {
    const inner = this.client.request<ImageResponse>({ method: 'POST', path: '/image', body, ...opts });
    return new APIPromise(
      inner.withResponse().then(({ data, response }) => ({ data: withHelpers(data), response })),
    );
  }
}
