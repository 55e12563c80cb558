import type { RequestListener } from 'node:http';
import type { Config } from './config.js';
import type { ServerDeps } from './context.js';
import { vectorIndexFor } from './domains/rag/vector-index.js';
import { buildOpenApiDocument } from './openapi.js';
import { tracingConfigFromEnv } from './telemetry/config.js';
import { instrumentListener } from './telemetry/http.js';
import { addGaugeSource, enableMetrics, metrics } from './telemetry/metrics.js';
import { routeMatcher } from './telemetry/routes.js';
import type { TracingHandle } from './telemetry/sdk.js';
import { traceLogFields } from './telemetry/tracing.js';

/**
 * Composition of the telemetry core (src/telemetry/, docs/observability.md) with the rest of
 * the service: enables metrics (`METRICS_PORT`) and starts the OpenTelemetry SDK (`OTEL_*`)
 * before anything that records is built, registers the scrape-time gauges, and wraps the HTTP
 * request listener. With both off, nothing here loads or wraps anything.
 */
export async function startTelemetry(config: Config): Promise<{ tracing: TracingHandle | undefined }> {
  if (config.metricsPort !== undefined) enableMetrics();
  const cfg = tracingConfigFromEnv(config.env);
  if (!cfg) return { tracing: undefined };
  const { startTracing } = await import('./telemetry/sdk.js');
  return { tracing: await startTracing(cfg) };
}

/**
 * The logger's options: with tracing asked for by `OTEL_*`, every line written inside a span
 * carries its `trace_id` and `span_id`.
 */
export const loggerOptions = (env: Record<string, string | undefined>) =>
  tracingConfigFromEnv(env) !== undefined ? { mixin: traceLogFields } : {};

/** Every run kind, so each series exists from the first scrape (at 0). */
const RUN_KINDS = ['turn', 'autonomous', 'rag_index'] as const;

/** The scrape-time gauges of this server's parts; returns their removal. */
export function registerGaugeSources(deps: ServerDeps): () => void {
  if (!metrics) return () => {};
  const em = () => deps.em();
  const removals = [
    addGaugeSource('aisuite_runs_queued', async () => {
      const rows = await em().execute<{ kind: string; n: string | number }[]>(
        `select kind, count(*) as n from runs where status = 'pending' group by kind`,
      );
      const n = new Map<string, number>(RUN_KINDS.map((k) => [k, 0]));
      for (const r of rows) n.set(r.kind, Number(r.n));
      return [...n].map(([kind, value]) => ({ labels: { kind }, value }));
    }),
    addGaugeSource('aisuite_runs_active', () => {
      const active = deps.runs.activeByKind();
      return RUN_KINDS.map((kind) => ({ labels: { kind }, value: active.get(kind) ?? 0 }));
    }),
    addGaugeSource('aisuite_rag_indexing_queue', async () => {
      const rows = await em().execute<{ n: string | number }[]>(
        `select count(*) as n from runs where kind = 'rag_index' and status in ('pending', 'running')`,
      );
      return [{ value: Number(rows[0]?.n ?? 0) }];
    }),
    addGaugeSource('aisuite_vector_index_memory_bytes', () => [
      { value: vectorIndexFor(deps.db, deps.em, deps.config.rag.vectorCacheMb).info().bytes },
    ]),
    addGaugeSource('aisuite_db_pool_connections', () => {
      const out: { labels: Record<string, string>; value: number }[] = [];
      const hot = deps.db.sql.stats();
      for (const [state, value] of Object.entries(hot)) out.push({ labels: { pool: 'hot', state }, value });
      const pool = ormPool(deps);
      if (pool) {
        out.push({ labels: { pool: 'orm', state: 'used' }, value: pool.numUsed() });
        out.push({ labels: { pool: 'orm', state: 'idle' }, value: pool.numFree() });
        out.push({ labels: { pool: 'orm', state: 'pending' }, value: pool.numPendingAcquires() });
      }
      return out;
    }),
  ];
  return () => {
    for (const r of removals) r();
  };
}

interface TarnPool {
  numUsed(): number;
  numFree(): number;
  numPendingAcquires(): number;
}

/** The ORM's connection pool (knex's tarn pool), when reachable. */
function ormPool(deps: ServerDeps): TarnPool | undefined {
  try {
    const conn = deps.db.orm.em.getConnection() as unknown as { getKnex(): { client: { pool?: TarnPool } } };
    return conn.getKnex().client.pool ?? undefined;
  } catch {
    return undefined;
  }
}

/**
 * The request listener with the HTTP metrics and server spans (telemetry/http.ts), routes
 * named by the OpenAPI document's templates under `/api/v1` and `/console-api/v1`.
 */
export function observedListener(listener: RequestListener): RequestListener {
  let match: ((path: string) => string) | undefined;
  const routeOf = (path: string) => {
    if (!match) {
      const paths = Object.keys(buildOpenApiDocument().paths ?? {});
      match = routeMatcher(
        [
          '/healthz',
          '/readyz',
          '/api/v1/openapi.json',
          ...paths.map((p) => `/api/v1${p}`),
          ...paths.map((p) => `/console-api/v1${p}`),
        ],
        ['/docs'],
      );
    }
    return match(path);
  };
  return instrumentListener(listener, routeOf);
}
