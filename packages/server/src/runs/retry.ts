import type { RunKind } from './types.js';

/**
 * How often a run may execute and how long it waits between executions (docs/run-engine.md,
 * "Retries"). One rule for every kind: a run executes at most `1 + retries` times, where
 * `retries` is `RUN_MAX_RETRIES` (default 2) or the kind's own `RUN_MAX_RETRIES_<KIND>`.
 * Turns never retry: a half-streamed reply is not replayed.
 */
export interface RetryPolicy {
  /** Retries per kind (executions = retries + 1). */
  retries: Record<RunKind, number>;
  /** Wait before the first retry (ms). */
  backoffMs: number;
  /** Each further retry waits this many times longer… */
  backoffFactor: number;
  /** …up to this (ms). */
  backoffMaxMs: number;
}

const RETRIABLE_KINDS = ['autonomous', 'rag_index'] as const;

const count = (v: string | undefined): number | undefined => {
  if (v === undefined || v.trim() === '') return undefined;
  const n = Number(v);
  return Number.isInteger(n) && n >= 0 ? n : undefined;
};

export function retryPolicyFromEnv(env: Record<string, string | undefined>): RetryPolicy {
  const all = count(env.RUN_MAX_RETRIES) ?? 2;
  // The older setting counted executions of autonomous runs; it still wins when set.
  const legacyAutonomous = count(env.RUN_AUTONOMOUS_MAX_ATTEMPTS);
  const retries: Record<RunKind, number> = { turn: 0, autonomous: all, rag_index: all };
  for (const kind of RETRIABLE_KINDS) {
    const own = count(env[`RUN_MAX_RETRIES_${kind.toUpperCase()}`]);
    if (own !== undefined) retries[kind] = own;
  }
  if (count(env.RUN_MAX_RETRIES_AUTONOMOUS) === undefined && legacyAutonomous !== undefined) {
    retries.autonomous = Math.max(0, legacyAutonomous - 1);
  }
  return {
    retries,
    backoffMs: count(env.RUN_RETRY_BACKOFF_MS) ?? 5000,
    backoffFactor: 6,
    backoffMaxMs: count(env.RUN_RETRY_BACKOFF_MAX_MS) ?? 300_000,
  };
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = retryPolicyFromEnv({});

/** Executions a new run of `kind` is allowed (its `max_attempts`). */
export const maxAttemptsFor = (policy: RetryPolicy, kind: RunKind): number =>
  kind === 'turn' ? 1 : 1 + policy.retries[kind];

/** The wait before the next execution of a run whose `attempts`-th execution failed (ms). */
export function backoffMs(policy: RetryPolicy, attempts: number): number {
  const exp = policy.backoffMs * policy.backoffFactor ** Math.max(0, attempts - 1);
  return Math.min(exp, policy.backoffMaxMs);
}

/**
 * The same as SQL over a run's `attempts` column `col`, as an interval: the claim computes the
 * wait of a run whose worker died (no process was left to write `not_before`).
 */
export function backoffSql(policy: RetryPolicy, col: string): { sql: string; params: number[] } {
  return {
    sql: `(least(?::float8 * power(?::float8, greatest(${col} - 1, 0)), ?::float8) * interval '1 millisecond')`,
    params: [policy.backoffMs, policy.backoffFactor, policy.backoffMaxMs],
  };
}

/**
 * The error a run ends with when its last execution failed with `reason`: the count is named
 * for kinds that retry, so an operator sees that the engine gave up rather than a one-off.
 */
export const givingUp = (reason: string, attempts: number, maxAttempts: number): string =>
  maxAttempts > 1 ? `${reason}; giving up after ${attempts} attempts` : reason;
