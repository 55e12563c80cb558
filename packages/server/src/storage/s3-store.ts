import type { Readable } from 'node:stream';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { byteCounter } from './local-store.js';
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

export interface S3StoreOptions {
  bucket: string;
  endpoint?: string;
  region?: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  forcePathStyle?: boolean;
  /** Prepended to every key (several deployments sharing one bucket). */
  prefix?: string;
  /**
   * The endpoint clients reach for presigned URLs, when it differs from `endpoint` (the
   * service talks to `http://minio:9000`, browsers to `https://files.example.com`). The
   * signature covers the host, so links are signed for this endpoint, not rewritten.
   */
  publicEndpoint?: string;
}

const CHECK_TIMEOUT_MS = 5_000;

const isNotFound = (err: unknown) => {
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
  return e?.name === 'NotFound' || e?.name === 'NoSuchKey' || e?.$metadata?.httpStatusCode === 404;
};

const encodeFilename = (name: string) =>
  `inline; filename="${name.replace(/[^\x20-\x7e]|["\\]/g, '_')}"; filename*=UTF-8''${encodeURIComponent(name)}`;

/**
 * S3 or any S3-compatible store (MinIO, R2, Ceph, s3rver). Streams of unknown length go up
 * as a multipart upload in 8 MB parts (`@aws-sdk/lib-storage`), so memory stays bounded.
 */
export class S3ObjectStore implements ObjectStore {
  readonly kind = 's3' as const;
  readonly client: S3Client;
  /** Signs presigned URLs: the same client, or one on `publicEndpoint`. */
  private readonly presigner: S3Client;
  private readonly bucket: string;
  private readonly prefix: string;
  private readonly endpoint: string;

  constructor(opts: S3StoreOptions) {
    this.bucket = opts.bucket;
    this.prefix = opts.prefix ?? '';
    this.endpoint = opts.endpoint ?? 'AWS S3';
    const client = (endpoint: string | undefined) =>
      new S3Client({
        region: opts.region ?? 'us-east-1',
        endpoint,
        forcePathStyle: opts.forcePathStyle ?? false,
        credentials:
          opts.accessKeyId && opts.secretAccessKey
            ? { accessKeyId: opts.accessKeyId, secretAccessKey: opts.secretAccessKey }
            : undefined,
      });
    this.client = client(opts.endpoint);
    this.presigner = opts.publicEndpoint ? client(opts.publicEndpoint) : this.client;
  }

  async check(): Promise<void> {
    try {
      await this.client.send(new HeadBucketCommand({ Bucket: this.bucket }), {
        abortSignal: AbortSignal.timeout(CHECK_TIMEOUT_MS),
      });
    } catch (err) {
      const e = err as { name?: string; message?: string; $metadata?: { httpStatusCode?: number } };
      const status = e.$metadata?.httpStatusCode;
      const bucket = `S3 bucket "${this.bucket}" at ${this.endpoint}`;
      if (status === 404 || e.name === 'NotFound' || e.name === 'NoSuchBucket') {
        throw new ObjectStoreUnavailableError(`${bucket} does not exist (S3_BUCKET)`);
      }
      if (status === 403 || status === 401) {
        throw new ObjectStoreUnavailableError(
          `${bucket} refused access (HTTP ${status}): check S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY and the bucket policy`,
        );
      }
      const reason =
        e.name === 'TimeoutError' || e.name === 'AbortError' ? 'no answer within 5 s' : e.message;
      throw new ObjectStoreUnavailableError(`${bucket} is unreachable: ${reason ?? e.name}`);
    }
  }

  private k(key: string): string {
    assertValidKey(key);
    return this.prefix + key;
  }

  async put(key: string, body: Readable | Buffer, opts: PutOptions = {}): Promise<{ size: number }> {
    const Key = this.k(key);
    if (Buffer.isBuffer(body)) {
      await this.client.send(
        new PutObjectCommand({ Bucket: this.bucket, Key, Body: body, ContentType: opts.contentType }),
        { abortSignal: opts.signal },
      );
      return { size: body.length };
    }
    const counter = byteCounter();
    body.on('error', (err) => counter.destroy(err));
    body.pipe(counter);
    const upload = new Upload({
      client: this.client,
      params: { Bucket: this.bucket, Key, Body: counter, ContentType: opts.contentType },
      queueSize: 2,
      partSize: 8 * 1024 * 1024,
      leavePartsOnError: false,
    });
    const onAbort = () => void upload.abort();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await upload.done();
    } finally {
      opts.signal?.removeEventListener('abort', onAbort);
    }
    return { size: counter.bytes };
  }

  async head(key: string): Promise<ObjectInfo | null> {
    try {
      const out = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.k(key) }));
      return { key, size: Number(out.ContentLength ?? 0), contentType: out.ContentType };
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  async get(key: string): Promise<ObjectBody | null> {
    try {
      const out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.k(key) }));
      return {
        key,
        size: Number(out.ContentLength ?? 0),
        contentType: out.ContentType,
        body: out.Body as Readable,
      };
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.k(key) }));
  }

  async presign(key: string, opts: PresignOptions = {}): Promise<string> {
    return getSignedUrl(
      this.presigner,
      new GetObjectCommand({
        Bucket: this.bucket,
        Key: this.k(key),
        ResponseContentType: opts.contentType,
        ResponseContentDisposition: opts.filename ? encodeFilename(opts.filename) : undefined,
      }),
      { expiresIn: opts.expiresIn ?? PRESIGN_TTL_SECONDS },
    );
  }
}
