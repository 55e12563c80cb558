import type { OutboundPolicy } from '../agents/outbound.js';
import { parseAllowlist } from '../agents/outbound.js';

/** The image capability's settings (docs/image.md, README configuration table). */
export interface ImageSettings {
  /** Largest source image (decoded bytes) and provider output accepted. */
  maxBytes: number;
  /** sharp's `limitInputPixels`: width × height above this is refused (image bombs). */
  maxPixels: number;
  urlTimeoutMs: number;
  urlMaxRedirects: number;
  /** Whole provider call, polling included. */
  timeoutMs: number;
  preferWaitSeconds: number;
  pollInitialMs: number;
  pollMaxMs: number;
  /** sharp pipelines at once in this process, and how long one may run (docs/image.md). */
  processConcurrency: number;
  processTimeoutSeconds: number;
  /** `auto`: store when objects go to S3; `true` / `false`: always / never by default. */
  storeDefault: 'auto' | 'true' | 'false';
  /** The `ultrasound` profile's default model id (a catalog image model), if set. */
  ultrasoundModel: string | undefined;
  policy: OutboundPolicy;
}

const int = (env: Record<string, string | undefined>, name: string, fallback: number, min = 0): number => {
  const v = env[name];
  if (v === undefined || v.trim() === '') return fallback;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min) throw new Error(`${name} must be an integer of at least ${min}`);
  return n;
};

export function imageSettingsFromEnv(env: Record<string, string | undefined>): ImageSettings {
  const storeDefault = (env.IMAGE_STORE_DEFAULT?.trim() || 'auto').toLowerCase();
  if (storeDefault !== 'auto' && storeDefault !== 'true' && storeDefault !== 'false') {
    throw new Error('IMAGE_STORE_DEFAULT must be auto, true or false');
  }
  return {
    maxBytes: int(env, 'IMAGE_MAX_BYTES', 10 * 1024 * 1024, 1),
    maxPixels: int(env, 'IMAGE_MAX_PIXELS', 25_000_000, 1),
    urlTimeoutMs: int(env, 'IMAGE_URL_TIMEOUT_MS', 10_000, 1),
    urlMaxRedirects: int(env, 'IMAGE_URL_MAX_REDIRECTS', 3),
    timeoutMs: int(env, 'IMAGE_TIMEOUT_MS', 120_000, 1),
    preferWaitSeconds: Math.min(60, int(env, 'IMAGE_PREFER_WAIT_SECONDS', 10)),
    pollInitialMs: int(env, 'IMAGE_POLL_INITIAL_MS', 500, 1),
    pollMaxMs: int(env, 'IMAGE_POLL_MAX_MS', 5_000, 1),
    processConcurrency: int(env, 'IMAGE_PROCESS_CONCURRENCY', 2, 1),
    processTimeoutSeconds: int(env, 'IMAGE_PROCESS_TIMEOUT_SECONDS', 20, 1),
    storeDefault,
    ultrasoundModel: env.IMAGE_ULTRASOUND_MODEL?.trim() || undefined,
    policy: parseAllowlist(env.OUTBOUND_ALLOWLIST),
  };
}
