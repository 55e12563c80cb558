import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { SqlExecutor } from '../db/sql.js';
import { RunBus } from './bus.js';
import { RunEngine } from './engine.js';
import { retryPolicyFromEnv } from './retry.js';

export { RunBus } from './bus.js';
export { RunEngine, WORKER_LOST_ERROR } from './engine.js';
export { backoffMs, givingUp, maxAttemptsFor, type RetryPolicy, retryPolicyFromEnv } from './retry.js';
export { isTransientConflict, isUniqueViolation, retryTransient, runStore } from './store.js';
export { toolCallStore } from './tool-calls.js';
export * from './types.js';

const intEnv = (v: string | undefined, fallback: number) => {
  const n = v === undefined || v.trim() === '' ? Number.NaN : Number(v);
  return Number.isFinite(n) && n >= 0 ? n : fallback;
};

/**
 * The run engine of this process. `RUN_LEASE_MS` (30000), `RUN_POLL_INTERVAL_MS` (1000),
 * `RUN_WORKER_CONCURRENCY` (4 autonomous runs; 0 = this process serves HTTP only),
 * `RUN_TURN_CONCURRENCY` (256 agent turns), `RUN_EVENT_FLUSH_MS` (40) and
 * `RUN_EVENT_BATCH_MAX` (500) tune it; `RUN_MAX_RETRIES` (2), `RUN_MAX_RETRIES_<KIND>`,
 * `RUN_RETRY_BACKOFF_MS` (5000) and `RUN_RETRY_BACKOFF_MAX_MS` (300000) bound retries
 * (docs/run-engine.md).
 */
export function createRunEngine(opts: {
  config: Config;
  log: Logger;
  em: () => EntityManager;
  /** The plain pool: the end of each execution is one statement there (decision 0021). */
  sql: SqlExecutor;
  onSweep?: () => Promise<unknown>;
}): RunEngine {
  const env = opts.config.env;
  const bus = new RunBus({ databaseUrl: opts.config.databaseUrl, log: opts.log, em: opts.em });
  return new RunEngine({
    em: opts.em,
    sql: opts.sql,
    log: opts.log,
    bus,
    leaseMs: intEnv(env.RUN_LEASE_MS, 30_000),
    pollMs: intEnv(env.RUN_POLL_INTERVAL_MS, 1000),
    concurrency: intEnv(env.RUN_WORKER_CONCURRENCY, 4),
    turnConcurrency: intEnv(env.RUN_TURN_CONCURRENCY, 256),
    eventFlushMs: intEnv(env.RUN_EVENT_FLUSH_MS, 40),
    eventBatchMax: Math.max(1, intEnv(env.RUN_EVENT_BATCH_MAX, 500)),
    onSweep: opts.onSweep,
    retry: retryPolicyFromEnv(env),
  });
}
