import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import { RunBus } from './bus.js';
import { RunEngine } from './engine.js';

export { RunBus } from './bus.js';
export { RunEngine, WORKER_LOST_ERROR } from './engine.js';
export { runStore } from './store.js';
export * from './types.js';

const intEnv = (v: string | undefined, fallback: number) => {
  const n = v === undefined || v.trim() === '' ? Number.NaN : Number(v);
  return Number.isFinite(n) && n >= 0 ? n : fallback;
};

/**
 * The run engine of this process. `RUN_LEASE_MS` (30000), `RUN_POLL_INTERVAL_MS` (1000) and
 * `RUN_WORKER_CONCURRENCY` (4; 0 = this process serves HTTP only) tune it.
 */
export function createRunEngine(opts: { config: Config; log: Logger; em: () => EntityManager }): RunEngine {
  const env = opts.config.env;
  const bus = new RunBus({ databaseUrl: opts.config.databaseUrl, log: opts.log, em: opts.em });
  return new RunEngine({
    em: opts.em,
    log: opts.log,
    bus,
    leaseMs: intEnv(env.RUN_LEASE_MS, 30_000),
    pollMs: intEnv(env.RUN_POLL_INTERVAL_MS, 1000),
    concurrency: intEnv(env.RUN_WORKER_CONCURRENCY, 4),
  });
}
