import path from 'node:path';
import type { Config } from '../config.js';
import { LocalObjectStore } from './local-store.js';
import type { ObjectStore } from './object-store.js';
import type { S3StoreOptions } from './s3-store.js';

export * from './local-store.js';
export * from './object-store.js';
export type { S3StoreOptions } from './s3-store.js';

const truthy = (v: string | undefined) => v !== undefined && /^(1|true|yes|on)$/i.test(v.trim());
const opt = (v: string | undefined) => (v === undefined || v.trim() === '' ? undefined : v.trim());

/**
 * S3 when `S3_BUCKET` is set, otherwise files under `DATA_DIR/objects` with links signed by
 * the service. `baseUrl` resolves the origin of signed links on the embedded store. The AWS
 * SDK is loaded only for S3: ~20 MB of the process's memory that the embedded store does not
 * need (docs/decisions/0019-lean-embedded-database.md).
 */
export async function createObjectStore(config: Config, baseUrl: () => string): Promise<ObjectStore> {
  const s3 = s3StoreOptions(config.env);
  if (s3) {
    const { S3ObjectStore } = await import('./s3-store.js');
    return new S3ObjectStore(s3);
  }
  if (!config.signingSecret) throw new Error('createObjectStore needs the signing secret');
  return new LocalObjectStore(localObjectsDir(config), config.signingSecret, baseUrl);
}

/** The S3 store the `S3_*` variables describe, or undefined without `S3_BUCKET`. */
export function s3StoreOptions(env: Record<string, string | undefined>): S3StoreOptions | undefined {
  const bucket = opt(env.S3_BUCKET);
  if (!bucket) return undefined;
  return {
    bucket,
    endpoint: opt(env.S3_ENDPOINT),
    region: opt(env.S3_REGION),
    accessKeyId: opt(env.S3_ACCESS_KEY_ID),
    secretAccessKey: opt(env.S3_SECRET_ACCESS_KEY),
    forcePathStyle: truthy(env.S3_FORCE_PATH_STYLE),
    prefix: opt(env.S3_KEY_PREFIX),
    publicEndpoint: opt(env.S3_PUBLIC_ENDPOINT),
  };
}

/** Where the embedded store keeps objects: `DATA_DIR/objects`. */
export const localObjectsDir = (config: Pick<Config, 'dataDir'>) => path.join(config.dataDir, 'objects');
