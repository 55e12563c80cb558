import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

/**
 * The process's Prometheus metrics (prom-client). Nothing is created until `enableMetrics()`
 * (the composition root calls it when `METRICS_PORT` is set); until then every recording
 * helper below is one `undefined` check. Names and labels follow the OpenTelemetry semantic
 * conventions in Prometheus form (dots to underscores, unit suffix); the service's own are
 * prefixed `aisuite_`. No label ever carries a workspace, key, user, session or run id or an
 * email: every label value comes from a bounded set (route templates, model ids of the
 * catalog, fixed enums). docs/observability.md lists them.
 */

/** Seconds buckets of the HTTP server duration (OTel advice, widened for streams). */
const HTTP_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 300];
const GEN_AI_DURATION_BUCKETS = [
  0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
const TOKEN_BUCKETS = [
  1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
];
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

type Labels = Record<string, string>;
/** A gauge's value read at scrape time from the part of the service that knows it. */
export type GaugeSource = () =>
  | { labels?: Labels; value: number }[]
  | Promise<{ labels?: Labels; value: number }[]>;

function createMetrics(registry: Registry) {
  const sources = new Map<string, Set<GaugeSource>>();
  /** A gauge summed over its registered sources when scraped (several servers in one process). */
  const sourcedGauge = (name: string, help: string, labelNames: string[] = []) => {
    const set = new Set<GaugeSource>();
    sources.set(name, set);
    return new Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      async collect() {
        this.reset();
        const totals = new Map<string, { labels: Labels; value: number }>();
        for (const source of set) {
          let rows: { labels?: Labels; value: number }[];
          try {
            rows = await source();
          } catch {
            continue; // a source that cannot answer (database down) leaves its share out
          }
          for (const r of rows) {
            const labels = r.labels ?? {};
            const k = JSON.stringify(labels);
            const t = totals.get(k);
            if (t) t.value += r.value;
            else totals.set(k, { labels, value: r.value });
          }
        }
        for (const t of totals.values()) this.set(t.labels, t.value);
      },
    });
  };
  const reg = [registry];
  return {
    registry,
    sources,
    httpDuration: new Histogram({
      name: 'http_server_request_duration_seconds',
      help: 'Duration of HTTP server requests (an event stream: until it ends).',
      labelNames: ['http_request_method', 'http_route', 'http_response_status_code'],
      buckets: HTTP_BUCKETS,
      registers: reg,
    }),
    genAiDuration: new Histogram({
      name: 'gen_ai_client_operation_duration_seconds',
      help: 'Duration of GenAI operations (model calls) as seen by the service.',
      labelNames: ['gen_ai_operation_name', 'gen_ai_request_model', 'gen_ai_provider_name', 'error_type'],
      buckets: GEN_AI_DURATION_BUCKETS,
      registers: reg,
    }),
    genAiTokens: new Histogram({
      name: 'gen_ai_client_token_usage',
      help: 'Tokens per model call as reported by the upstream.',
      labelNames: [
        'gen_ai_operation_name',
        'gen_ai_request_model',
        'gen_ai_provider_name',
        'gen_ai_token_type',
      ],
      buckets: TOKEN_BUCKETS,
      registers: reg,
    }),
    ttft: new Histogram({
      name: 'gen_ai_server_time_to_first_token_seconds',
      help: 'Time from sending a streamed model call to its first token.',
      labelNames: ['gen_ai_operation_name', 'gen_ai_request_model', 'gen_ai_provider_name'],
      buckets: TTFT_BUCKETS,
      registers: reg,
    }),
    creditsDebited: new Counter({
      name: 'aisuite_credits_debited_usd_total',
      help: 'Credits charged for metered usage, in US dollars.',
      registers: reg,
    }),
    refusals: new Counter({
      name: 'aisuite_metering_refusals_total',
      help: 'Requests refused by metering: token quota exhausted (403) or credits insufficient (402).',
      labelNames: ['reason'],
      registers: reg,
    }),
    rateLimited: new Counter({
      name: 'aisuite_rate_limited_requests_total',
      help: 'Requests refused with 429 by a rate-limit bucket.',
      labelNames: ['bucket'],
      registers: reg,
    }),
    sseOpen: new Gauge({
      name: 'aisuite_sse_streams_open',
      help: 'Server-sent event streams open now.',
      registers: reg,
    }),
    runsQueued: sourcedGauge('aisuite_runs_queued', 'Runs waiting for a worker (pending), in the database.', [
      'kind',
    ]),
    runsActive: sourcedGauge('aisuite_runs_active', 'Runs this process is executing now.', ['kind']),
    leaseExpiries: new Counter({
      name: 'aisuite_run_lease_expiries_total',
      help: 'Runs recovered by this process after their worker lost its lease.',
      labelNames: ['kind'],
      registers: reg,
    }),
    retries: new Counter({
      name: 'aisuite_run_retries_total',
      help: 'Runs released for another attempt after a transient failure.',
      labelNames: ['kind'],
      registers: reg,
    }),
    dbPool: sourcedGauge(
      'aisuite_db_pool_connections',
      'Database connections by pool (orm, hot) and state (used, idle, pending).',
      ['pool', 'state'],
    ),
    ragQueue: sourcedGauge(
      'aisuite_rag_indexing_queue',
      'Documents waiting to be indexed or being indexed, in the database.',
    ),
    vectorMemory: sourcedGauge(
      'aisuite_vector_index_memory_bytes',
      'Memory held by in-process vector indexes (bytes).',
    ),
    webhooks: new Counter({
      name: 'aisuite_webhook_deliveries_total',
      help: 'Webhook delivery attempts by outcome (delivered, failed).',
      labelNames: ['outcome'],
      registers: reg,
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;

/** The metrics, once enabled; `undefined` means every helper is a no-op. */
export let metrics: Metrics | undefined;

/** Creates the registry (default process metrics included). Idempotent. */
export function enableMetrics(): Metrics {
  if (metrics) return metrics;
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  metrics = createMetrics(registry);
  return metrics;
}

/**
 * Registers a scrape-time source of a sourced gauge (`aisuite_runs_queued`, `aisuite_runs_active`,
 * `aisuite_db_pool_connections`, `aisuite_rag_indexing_queue`, `aisuite_vector_index_memory_bytes`);
 * returns its removal. A no-op when metrics are off.
 */
export function addGaugeSource(name: string, source: GaugeSource): () => void {
  const set = metrics?.sources.get(name);
  if (!set) return () => {};
  set.add(source);
  return () => set.delete(source);
}

export function countCreditsDebited(micros: number): void {
  if (metrics && micros > 0) metrics.creditsDebited.inc(micros / 1_000_000);
}

export function countRefusal(reason: 'token_quota' | 'credits'): void {
  metrics?.refusals.inc({ reason });
}

export function countRateLimited(bucket: string): void {
  metrics?.rateLimited.inc({ bucket });
}

/** Counts an event stream as open until its response closes (`aisuite_sse_streams_open`). */
export function trackSse(res: { once(event: 'close', fn: () => void): unknown }): void {
  const m = metrics;
  if (!m) return;
  m.sseOpen.inc();
  res.once('close', () => m.sseOpen.dec());
}

export function countLeaseExpiry(kind: string): void {
  metrics?.leaseExpiries.inc({ kind });
}

export function countRunRetry(kind: string): void {
  metrics?.retries.inc({ kind });
}

export function countWebhookDelivery(outcome: 'delivered' | 'failed'): void {
  metrics?.webhooks.inc({ outcome });
}
