import type { RateLimitBucket } from './types.js';

export interface RateLimitRule {
  /** Requests per window; 0 turns the bucket off. */
  limit: number;
  windowSeconds: number;
}

export interface MeteringSettings {
  rateLimits: Record<RateLimitBucket, RateLimitRule>;
  /** Output tokens between two mid-generation credit checks. */
  creditCheckEveryTokens: number;
  /** Expected reply length (output tokens) of a model before any reply of it was seen. */
  defaultOutputTokens: number;
  /** Cap on the expected reply length a hold or a quota reservation is sized for. */
  maxHoldOutputTokens: number;
  /** How long a hold outlives its process without a heartbeat (the run engine's lease). */
  holdLeaseMs: number;
  /**
   * How long requests wait for the first reply of a model on an endpoint before sizing their
   * `/chat` quota reservation (`FirstReplyGate`); 0 turns the wait off. Default 5000.
   */
  firstReplyWaitMs?: number;
  /**
   * Most `/chat` key admissions one statement takes while another is in flight
   * (`AdmissionBatcher`); 1 gives each request its own statement. Default 64.
   */
  admissionBatchMax?: number;
}

const int = (v: string | undefined, name: string, fallback: number): number => {
  if (v === undefined || v.trim() === '') return fallback;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer`);
  return n;
};

/** The run engine's lease (`RUN_LEASE_MS`, read as leniently as the engine does), at least 1 s. */
const leaseMs = (v: string | undefined) => {
  const n = v === undefined || v.trim() === '' ? Number.NaN : Number(v);
  return Number.isFinite(n) && n > 0 ? Math.max(1000, n) : 30_000;
};

/** Metering settings from the environment (documented in docs/models-and-metering.md). */
export function meteringSettingsFromEnv(env: Record<string, string | undefined>): MeteringSettings {
  const windowSeconds = Math.max(1, int(env.RATE_LIMIT_WINDOW_SECONDS, 'RATE_LIMIT_WINDOW_SECONDS', 60));
  const rule = (name: string, fallback: number): RateLimitRule => ({
    limit: int(env[name], name, fallback),
    windowSeconds,
  });
  return {
    rateLimits: {
      chat: rule('RATE_LIMIT_CHAT', 60),
      session_create: rule('RATE_LIMIT_SESSION_CREATE', 30),
      agent_message: rule('RATE_LIMIT_AGENT_MESSAGE', 60),
      app_chat: rule('RATE_LIMIT_APP_CHAT', 120),
    },
    creditCheckEveryTokens: Math.max(
      1,
      int(env.METERING_CREDIT_CHECK_TOKENS, 'METERING_CREDIT_CHECK_TOKENS', 256),
    ),
    defaultOutputTokens: Math.max(
      1,
      int(env.METERING_DEFAULT_OUTPUT_TOKENS, 'METERING_DEFAULT_OUTPUT_TOKENS', 512),
    ),
    maxHoldOutputTokens: Math.max(
      1,
      int(env.METERING_MAX_HOLD_OUTPUT_TOKENS, 'METERING_MAX_HOLD_OUTPUT_TOKENS', 4096),
    ),
    holdLeaseMs: leaseMs(env.RUN_LEASE_MS),
    firstReplyWaitMs: int(env.METERING_FIRST_REPLY_WAIT_MS, 'METERING_FIRST_REPLY_WAIT_MS', 5000),
    admissionBatchMax: Math.max(1, int(env.METERING_ADMISSION_BATCH, 'METERING_ADMISSION_BATCH', 64)),
  };
}
