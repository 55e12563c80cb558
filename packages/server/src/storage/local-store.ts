import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../data-dir.js';
import {
  assertValidKey,
  type ObjectBody,
  type ObjectInfo,
  type ObjectStore,
  ObjectStoreUnavailableError,
  PRESIGN_TTL_SECONDS,
  type PresignOptions,
  type PutOptions,
} from './object-store.js';

/** Path under /api/v1 where the service serves HMAC-signed object links. */
export const SIGNED_OBJECT_ROUTE = '/storage/objects';

export interface SignedUrlParams {
  key: string;
  exp: number;
  contentType?: string;
  filename?: string;
}

/** Counts bytes flowing through, so a streamed body's size is known without buffering it. */
export function byteCounter(): Transform & { bytes: number } {
  const t = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      (t as unknown as { bytes: number }).bytes += chunk.length;
      cb(null, chunk);
    },
  }) as Transform & { bytes: number };
  t.bytes = 0;
  return t;
}

/**
 * The embedded default: objects are files under `DATA_DIR/objects`, written to a temporary
 * file and renamed into place (a reader never sees half an object). Links are signed with an
 * HMAC of the key, expiry, content type and file name, and served by the service itself.
 */
export class LocalObjectStore implements ObjectStore {
  readonly kind = 'local' as const;
  private readonly hmacKey: Buffer;

  constructor(
    private readonly root: string,
    signingSecret: string,
    /** Origin links point at (`PUBLIC_BASE_URL`, or the listening address once known). */
    private baseUrl: () => string,
  ) {
    this.hmacKey = createHmac('sha256', signingSecret).update('ai-suite:object-url:v1').digest();
  }

  private file(key: string): string {
    assertValidKey(key);
    return path.join(this.root, ...key.split('/'));
  }

  async put(key: string, body: Readable | Buffer, opts: PutOptions = {}): Promise<{ size: number }> {
    const target = this.file(key);
    await fsp.mkdir(path.dirname(target), { recursive: true, mode: PRIVATE_DIR_MODE });
    const tmp = `${target}.${randomBytes(6).toString('hex')}.part`;
    const counter = byteCounter();
    const source = Buffer.isBuffer(body) ? Readable.from([body]) : body;
    try {
      await pipeline(source, counter, fs.createWriteStream(tmp, { mode: PRIVATE_FILE_MODE }), {
        signal: opts.signal,
      });
      await fsp.rename(tmp, target);
    } catch (err) {
      await fsp.rm(tmp, { force: true });
      throw err;
    }
    return { size: counter.bytes };
  }

  async head(key: string): Promise<ObjectInfo | null> {
    try {
      const st = await fsp.stat(this.file(key));
      return st.isFile() ? { key, size: st.size } : null;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  async get(key: string): Promise<ObjectBody | null> {
    const file = this.file(key);
    let handle: fsp.FileHandle;
    try {
      handle = await fsp.open(file, 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    const st = await handle.stat();
    return { key, size: st.size, body: handle.createReadStream() };
  }

  async delete(key: string): Promise<void> {
    await fsp.rm(this.file(key), { force: true });
  }

  async presign(key: string, opts: PresignOptions = {}): Promise<string> {
    assertValidKey(key);
    const exp = Math.floor(Date.now() / 1000) + (opts.expiresIn ?? PRESIGN_TTL_SECONDS);
    const params: SignedUrlParams = { key, exp, contentType: opts.contentType, filename: opts.filename };
    const q = new URLSearchParams({ exp: String(exp) });
    if (opts.contentType) q.set('ct', opts.contentType);
    if (opts.filename) q.set('fn', opts.filename);
    q.set('sig', this.sign(params));
    const base = this.baseUrl().replace(/\/+$/, '');
    return `${base}/api/v1${SIGNED_OBJECT_ROUTE}/${key}?${q.toString()}`;
  }

  private sign(p: SignedUrlParams): string {
    return createHmac('sha256', this.hmacKey)
      .update([p.key, String(p.exp), p.contentType ?? '', p.filename ?? ''].join('\n'))
      .digest('base64url');
  }

  /** True when `sig` is this store's signature of the parameters and the link has not expired. */
  verify(p: SignedUrlParams, sig: string, nowSeconds = Math.floor(Date.now() / 1000)): boolean {
    if (!Number.isSafeInteger(p.exp) || p.exp < nowSeconds) return false;
    try {
      assertValidKey(p.key);
    } catch {
      return false;
    }
    const expected = Buffer.from(this.sign(p));
    const given = Buffer.from(sig);
    return expected.length === given.length && timingSafeEqual(expected, given);
  }

  async check(): Promise<void> {
    try {
      await fsp.mkdir(this.root, { recursive: true });
      await fsp.access(this.root, fs.constants.W_OK);
    } catch (err) {
      throw new ObjectStoreUnavailableError(
        `Object directory ${this.root} is not writable: ${(err as Error).message}`,
      );
    }
  }

  setBaseUrl(resolver: () => string): void {
    this.baseUrl = resolver;
  }
}
