import type { TracingConfig } from './config.js';
import { setTracer } from './tracing.js';

/** The running SDK: flushes and stops it. */
export interface TracingHandle {
  flush(): Promise<void>;
  shutdown(): Promise<void>;
}

let running: { handle: TracingHandle; key: string } | undefined;

/**
 * Starts the OpenTelemetry SDK for `cfg`: a Node tracer provider (AsyncLocalStorage context,
 * W3C trace context and baggage propagation), the OTLP/HTTP exporter of the configured
 * protocol behind a batch processor, the sampler of `OTEL_TRACES_SAMPLER`, the `pg` query
 * spans and `traceparent` on outgoing HTTP requests. Loaded with dynamic imports, so a process
 * that never calls this loads none of it. Process-wide: a second call with the same settings
 * returns the running SDK; with other settings it replaces it.
 */
export async function startTracing(cfg: TracingConfig): Promise<TracingHandle> {
  const key = JSON.stringify(cfg);
  if (running?.key === key) return running.handle;
  if (running) await running.handle.shutdown();
  const [api, base, node, resources, core] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/core'),
  ]);
  const exporterOpts = { url: cfg.url, headers: cfg.headers };
  const exporter =
    cfg.protocol === 'http/json'
      ? new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter(exporterOpts)
      : new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter(exporterOpts);
  const ratio = Number(cfg.samplerArg ?? '1');
  const r = Number.isFinite(ratio) && ratio >= 0 && ratio <= 1 ? ratio : 1;
  const samplers: Record<string, () => import('@opentelemetry/sdk-trace-base').Sampler> = {
    always_on: () => new base.AlwaysOnSampler(),
    always_off: () => new base.AlwaysOffSampler(),
    traceidratio: () => new base.TraceIdRatioBasedSampler(r),
    parentbased_always_on: () => new base.ParentBasedSampler({ root: new base.AlwaysOnSampler() }),
    parentbased_always_off: () => new base.ParentBasedSampler({ root: new base.AlwaysOffSampler() }),
    parentbased_traceidratio: () =>
      new base.ParentBasedSampler({ root: new base.TraceIdRatioBasedSampler(r) }),
  };
  const provider = new node.NodeTracerProvider({
    resource: resources.resourceFromAttributes({
      ...cfg.resourceAttributes,
      'service.name': cfg.serviceName,
    }),
    sampler: (
      samplers[cfg.sampler] ??
      (samplers.parentbased_always_on as () => import('@opentelemetry/sdk-trace-base').Sampler)
    )(),
    spanProcessors: [new base.BatchSpanProcessor(exporter)],
  });
  provider.register({
    propagator: new core.CompositePropagator({
      propagators: [new core.W3CTraceContextPropagator(), new core.W3CBaggagePropagator()],
    }),
  });
  setTracer(api.trace.getTracer('ai-suite'), cfg.captureContent);
  const { instrumentPg } = await import('./pg.js');
  const { propagateOutgoing } = await import('./propagation.js');
  const unpatchPg = await instrumentPg();
  const stopPropagation = propagateOutgoing();
  const handle: TracingHandle = {
    flush: () => provider.forceFlush(),
    async shutdown() {
      if (running?.handle === handle) running = undefined;
      setTracer(undefined);
      unpatchPg();
      stopPropagation();
      await provider.shutdown();
      api.trace.disable();
      api.context.disable();
      api.propagation.disable();
    },
  };
  running = { handle, key };
  return handle;
}

/** Flushes the running SDK's pending spans (tests, shutdown). */
export async function flushTracing(): Promise<void> {
  await running?.handle.flush();
}

/** Stops the running SDK, if any. */
export async function stopTracing(): Promise<void> {
  await running?.handle.shutdown();
}
