import type { Readable } from 'node:stream';

/** Presigned (or HMAC-signed) download links live this long: spec section 8. */
export const PRESIGN_TTL_SECONDS = 15 * 60;

export interface PutOptions {
  contentType?: string;
  /** Known length, when the caller has it (lets S3 use one PUT instead of a multipart upload). */
  contentLength?: number;
  /** Aborts the upload; the partial object is discarded. */
  signal?: AbortSignal;
}

export interface ObjectInfo {
  key: string;
  size: number;
  contentType?: string;
}

export interface ObjectBody extends ObjectInfo {
  body: Readable;
}

export interface PresignOptions {
  /** Seconds; default 15 minutes. */
  expiresIn?: number;
  /** Content type the download is served with. */
  contentType?: string;
  /** File name offered in `Content-Disposition: inline; filename=…`. */
  filename?: string;
}

/**
 * The one object-store layer of the server: uploads, images, deliverables and imports all go
 * through it. Keys are opaque strings (`ws/<workspaceId>/<objectId>`); bodies are streamed in
 * both directions, never held whole in memory.
 */
export interface ObjectStore {
  readonly kind: 's3' | 'local';
  /** Streams `body` to `key`, replacing any object there; resolves with the stored size. */
  put(key: string, body: Readable | Buffer, opts?: PutOptions): Promise<{ size: number }>;
  /** The object as a stream, or null when the key does not exist. */
  get(key: string): Promise<ObjectBody | null>;
  head(key: string): Promise<ObjectInfo | null>;
  /** Deletes the object; a missing key is not an error. */
  delete(key: string): Promise<void>;
  /** A GET URL anyone holding it may use until it expires. */
  presign(key: string, opts?: PresignOptions): Promise<string>;
  /**
   * Throws `ObjectStoreUnavailableError` with an operator-readable reason when the store
   * cannot be used (missing bucket, refused credentials, unreachable endpoint, unwritable
   * directory). Run at start and by `/readyz`.
   */
  check(): Promise<void>;
}

export class ObjectStoreUnavailableError extends Error {
  override name = 'ObjectStoreUnavailableError';
}

/** Object keys: letters, digits and `/._-`, no `..` segment, no leading slash. */
export function assertValidKey(key: string): void {
  if (
    !key ||
    key.length > 512 ||
    !/^[A-Za-z0-9._\-/]+$/.test(key) ||
    key.startsWith('/') ||
    key.split('/').some((seg) => seg === '' || seg === '.' || seg === '..')
  ) {
    throw new Error(`Invalid object key: ${key}`);
  }
}
