import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';

const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));

const intFromEnv = (fallback: number) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return fallback;
      const n = Number(v);
      if (!Number.isFinite(n)) {
        ctx.addIssue({ code: 'custom', message: `expected a number, got "${v}"` });
        return z.NEVER;
      }
      return n;
    });

const poolSize = (fallback: number) =>
  intFromEnv(fallback).refine(
    (n) => Number.isInteger(n) && n >= 1 && n <= 1000,
    'expected an integer from 1 to 1000',
  );

/** A whole number within [min, max], for limits. */
const boundedInt = (fallback: number, min: number, max: number) =>
  intFromEnv(fallback).refine(
    (n) => Number.isInteger(n) && n >= min && n <= max,
    `expected an integer from ${min} to ${max}`,
  );

const onOff = (fallback: boolean) =>
  optionalString.transform((v, ctx) => {
    if (v === undefined) return fallback;
    if (v === 'on' || v === 'off') return v === 'on';
    ctx.addIssue({ code: 'custom', message: `expected "on" or "off", got "${v}"` });
    return z.NEVER;
  });

/**
 * One validated view of the environment. Everything the server reads from `process.env`
 * goes through here, so a bad value fails at start with a clear message, not later.
 */
export const ConfigSchema = z.object({
  PORT: intFromEnv(8080),
  HOST: z.string().default('0.0.0.0'),
  DATA_DIR: z.string().default('./.data'),
  DATABASE_URL: optionalString,
  /** Connections of the ORM's pool (every route off the hot paths, the run engine's claims). */
  DATABASE_POOL_MAX: poolSize(10),
  /**
   * Connections of the plain pool of the hot paths (`/chat`, app chat and agent turns, their
   * metering, run events): one statement each, never held across statements. Five measured
   * better than ten for agent turns on a 2-core host (decision 0030).
   */
  DATABASE_HOT_POOL_MAX: poolSize(5),
  /**
   * Whether those connections pipeline their statements (PostgreSQL server only; decision 0030):
   * `on` sends a statement at once on the least busy connection; `off` queues it in the
   * process until a connection is free (one statement on the wire per connection).
   */
  DATABASE_HOT_POOL_PIPELINE: onOff(true),
  /**
   * Where the embedded database's engine runs (no `DATABASE_URL`; decision 0039): `worker`
   * (the default), a thread of its own, so it works on another core than the event loop;
   * `main`, the server's thread (~15 MB less idle memory, one core for everything).
   */
  EMBEDDED_DATABASE_THREAD: optionalString.transform((v, ctx) => {
    if (v === undefined) return 'worker' as const;
    if (v === 'worker' || v === 'main') return v;
    ctx.addIssue({ code: 'custom', message: `expected "worker" or "main", got "${v}"` });
    return z.NEVER;
  }),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** Port of the Prometheus endpoint `GET /metrics` (its own listener; off when unset; 0 picks a free one). */
  METRICS_PORT: optionalString.transform((v, ctx) => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0 || n > 65535) {
      ctx.addIssue({ code: 'custom', message: `expected a port from 0 to 65535, got "${v}"` });
      return z.NEVER;
    }
    return n;
  }),
  /** Address the metrics listener binds (default loopback: never public by accident). */
  METRICS_HOST: z.string().default('127.0.0.1'),
  PUBLIC_BASE_URL: optionalString,
  /** Secret used to sign URLs and webhooks; derived and persisted under DATA_DIR when unset. */
  SIGNING_SECRET: optionalString,
  INIT_WORKSPACE_NAME: optionalString,
  INIT_USER_EMAIL: optionalString,
  INIT_USER_PASSWORD: optionalString,
  INIT_API_KEY: optionalString,
  INIT_CREDITS_USD: optionalString,
  INIT_MONTHLY_TOKEN_QUOTA: optionalString,
  SHUTDOWN_GRACE_MS: intFromEnv(10_000),
  /**
   * The listen queue: connections the kernel completes before the server accepts them. The
   * kernel caps it at `net.core.somaxconn`. Node's default, 511, overflowed under a burst of
   * 1000 simultaneous connections (bench/metering-bursts): the overflowed ones were reset.
   */
  LISTEN_BACKLOG: intFromEnv(4096),
  CONSOLE_DIR: optionalString,
  /** Default monthly document-question quota per workspace (`unlimited` or unset: none). */
  RAG_MONTHLY_QUERY_QUOTA: optionalString.transform((v, ctx): number | null => {
    if (v === undefined || v === 'unlimited') return null;
    if (!/^\d+$/.test(v)) {
      ctx.addIssue({ code: 'custom', message: `expected a non-negative integer or "unlimited", got "${v}"` });
      return z.NEVER;
    }
    return Number(v);
  }),
  /**
   * Vector stage (decision 0034): `auto` = pgvector HNSW where the database has pgvector, else
   * the in-process index; `memory` = the in-process index everywhere; `sql` = the exact cosine
   * in SQL where pgvector is absent (the old fallback, slow beyond a few thousand chunks).
   */
  RAG_VECTOR_INDEX: z.enum(['auto', 'memory', 'sql']).default('auto'),
  /** Memory budget of the in-process vector index, all workspaces together (LRU). */
  RAG_VECTOR_CACHE_MB: intFromEnv(512),
  /**
   * Untrusted documents are extracted and chunked in a pool of worker threads (decision 0040):
   * by default one fewer than the cores, at least one, so the request loop keeps a core.
   * `0` extracts on the event loop (no isolation, no memory or time limit; for comparison).
   */
  DOCUMENT_WORKERS: boundedInt(Math.max(1, os.availableParallelism() - 1), 0, 64),
  /** Heap of each extraction worker; a job that needs more fails with the limit named. */
  DOCUMENT_WORKER_MEMORY_MB: boundedInt(512, 64, 16_384),
  /** Wall time a job may hold its worker (CPU work only); past it its worker is terminated. */
  DOCUMENT_WORKER_TIMEOUT_MS: boundedInt(120_000, 100, 3_600_000),
  /**
   * Documents of one workspace in the extraction pipeline at once (waiting for a worker, being
   * extracted, or being stored); past it an upload's file fails at once, a background indexing
   * run waits (docs/rag.md, "Fairness").
   */
  DOCUMENT_QUEUE_PER_WORKSPACE: boundedInt(8, 1, 10_000),
  DOCUMENT_MAX_PDF_PAGES: boundedInt(2000, 1, 1_000_000),
  DOCUMENT_MAX_CSV_COLUMNS: boundedInt(2000, 1, 1_000_000),
  DOCUMENT_MAX_CSV_RECORD_BYTES: boundedInt(1024 * 1024, 1024, 1024 * 1024 * 1024),
  DOCUMENT_MAX_OOXML_PARTS: boundedInt(10_000, 1, 1_000_000),
  DOCUMENT_MAX_OOXML_PART_MB: boundedInt(8, 1, 4096),
  DOCUMENT_MAX_OOXML_TOTAL_MB: boundedInt(32, 1, 16_384),
  DOCUMENT_MAX_JSON_DEPTH: boundedInt(64, 1, 10_000),
  DOCUMENT_MAX_CHARS: boundedInt(200_000_000, 1, 2_000_000_000),
  DOCUMENT_MAX_CHUNKS: boundedInt(200_000, 1, 100_000_000),
  /** express `trust proxy`: "true", a hop count, or a list of addresses/subnets; off by default. */
  TRUST_PROXY: optionalString.transform((v): boolean | number | string => {
    if (v === undefined || v === 'false') return false;
    if (v === 'true') return true;
    return /^\d+$/.test(v) ? Number(v) : v;
  }),
});

export type Env = z.infer<typeof ConfigSchema>;

export interface Config {
  port: number;
  host: string;
  dataDir: string;
  databaseUrl: string | undefined;
  /** `DATABASE_POOL_MAX`: connections of the ORM's pool (10). */
  databasePoolMax: number;
  /** `DATABASE_HOT_POOL_MAX`: connections of the hot paths' plain pool (5). */
  databaseHotPoolMax: number;
  /** `DATABASE_HOT_POOL_PIPELINE`: whether that pool pipelines statements on the server (on). */
  databaseHotPoolPipeline: boolean;
  /** `EMBEDDED_DATABASE_THREAD`: where the embedded database's engine runs (`worker`). */
  embeddedDatabaseThread: 'worker' | 'main';
  logLevel: Env['LOG_LEVEL'];
  /** `METRICS_PORT`: the Prometheus listener's port; undefined = no metrics. */
  metricsPort: number | undefined;
  /** `METRICS_HOST` (127.0.0.1). */
  metricsHost: string;
  publicBaseUrl: string | undefined;
  signingSecret: string | undefined;
  shutdownGraceMs: number;
  /** `listen()` backlog (capped by the kernel's `net.core.somaxconn`). */
  listenBacklog: number;
  trustProxy: boolean | number | string;
  /** The web console's built files (`packages/console/dist` unless `CONSOLE_DIR` says otherwise). */
  consoleDir: string;
  /** Document question answering: the default monthly query quota (null = unlimited). */
  rag: { monthlyQueryQuota: number | null; vectorIndex: 'auto' | 'memory' | 'sql'; vectorCacheMb: number };
  /** Untrusted documents (`DOCUMENT_*`): the extraction pool and the bounds of one document. */
  documents: {
    pool: { workers: number; memoryMb: number; timeoutMs: number; perWorkspace: number };
    limits: {
      maxPdfPages: number;
      maxCsvColumns: number;
      maxCsvRecordBytes: number;
      maxOoxmlParts: number;
      maxOoxmlPartBytes: number;
      maxOoxmlTotalBytes: number;
      maxJsonDepth: number;
      maxChars: number;
      maxChunks: number;
    };
  };
  init: {
    workspaceName?: string;
    userEmail?: string;
    userPassword?: string;
    apiKey?: string;
    creditsUsd?: string;
    monthlyTokenQuota?: string;
  };
  /** Raw environment, for domains that read their own optional settings. */
  env: Record<string, string | undefined>;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const parsed = ConfigSchema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`Invalid configuration:\n${lines.join('\n')}`);
  }
  const e = parsed.data;
  return {
    port: e.PORT,
    host: e.HOST,
    // `pnpm start` / `pnpm cli` run inside packages/server; INIT_CWD (set by pnpm and npm) is
    // where the operator typed the command, so a relative DATA_DIR means the same to both.
    dataDir: path.resolve(env.INIT_CWD ?? '', e.DATA_DIR),
    databaseUrl: e.DATABASE_URL,
    databasePoolMax: e.DATABASE_POOL_MAX,
    databaseHotPoolMax: e.DATABASE_HOT_POOL_MAX,
    databaseHotPoolPipeline: e.DATABASE_HOT_POOL_PIPELINE,
    embeddedDatabaseThread: e.EMBEDDED_DATABASE_THREAD,
    logLevel: e.LOG_LEVEL,
    metricsPort: e.METRICS_PORT,
    metricsHost: e.METRICS_HOST,
    publicBaseUrl: e.PUBLIC_BASE_URL,
    signingSecret: e.SIGNING_SECRET,
    shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
    listenBacklog: e.LISTEN_BACKLOG,
    trustProxy: e.TRUST_PROXY,
    consoleDir: e.CONSOLE_DIR
      ? path.resolve(env.INIT_CWD ?? '', e.CONSOLE_DIR)
      : // src/config.ts and the built dist/main.js sit at the same depth of packages/server.
        fileURLToPath(new URL('../../console/dist', import.meta.url)),
    rag: {
      monthlyQueryQuota: e.RAG_MONTHLY_QUERY_QUOTA,
      vectorIndex: e.RAG_VECTOR_INDEX,
      vectorCacheMb: e.RAG_VECTOR_CACHE_MB,
    },
    documents: {
      pool: {
        workers: e.DOCUMENT_WORKERS,
        memoryMb: e.DOCUMENT_WORKER_MEMORY_MB,
        timeoutMs: e.DOCUMENT_WORKER_TIMEOUT_MS,
        perWorkspace: e.DOCUMENT_QUEUE_PER_WORKSPACE,
      },
      limits: {
        maxPdfPages: e.DOCUMENT_MAX_PDF_PAGES,
        maxCsvColumns: e.DOCUMENT_MAX_CSV_COLUMNS,
        maxCsvRecordBytes: e.DOCUMENT_MAX_CSV_RECORD_BYTES,
        maxOoxmlParts: e.DOCUMENT_MAX_OOXML_PARTS,
        maxOoxmlPartBytes: e.DOCUMENT_MAX_OOXML_PART_MB * 1024 * 1024,
        maxOoxmlTotalBytes: e.DOCUMENT_MAX_OOXML_TOTAL_MB * 1024 * 1024,
        maxJsonDepth: e.DOCUMENT_MAX_JSON_DEPTH,
        maxChars: e.DOCUMENT_MAX_CHARS,
        maxChunks: e.DOCUMENT_MAX_CHUNKS,
      },
    },
    init: {
      workspaceName: e.INIT_WORKSPACE_NAME,
      userEmail: e.INIT_USER_EMAIL,
      userPassword: e.INIT_USER_PASSWORD,
      apiKey: e.INIT_API_KEY,
      creditsUsd: e.INIT_CREDITS_USD,
      monthlyTokenQuota: e.INIT_MONTHLY_TOKEN_QUOTA,
    },
    env,
  };
}
