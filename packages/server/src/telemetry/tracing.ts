import {
  type Attributes,
  type Context,
  context,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';

/**
 * Tracing helpers over `@opentelemetry/api`. The SDK (exporter, processor, context manager) is
 * loaded by `startTracing` (sdk.ts) only when an OTLP endpoint is configured; until then
 * `tracer` is `undefined` and every helper returns at its first check, so the code that calls
 * them (request listener, model calls, tools, the run engine) costs nothing measurable.
 */
export let tracer: Tracer | undefined;

/** Whether prompt and completion text go on the GenAI spans (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`). */
export let captureContent = false;

export function setTracer(t: Tracer | undefined, capture = false): void {
  tracer = t;
  captureContent = capture;
}

export type { Attributes, Context, Span };
export { SpanKind, SpanStatusCode };

/**
 * Whether a span started under `parent` would be recorded. Not under a local span that is not
 * (every sampler offered decides a child as its local parent: `always_on` records both,
 * `traceidratio` decides on the same trace id, the `parentbased_*` follow it), so no work is
 * done for it; a remote parent (a received or stored `traceparent`) leaves it to the sampler.
 */
export function recordsUnder(parent: Context): boolean {
  const span = trace.getSpan(parent);
  return span === undefined || span.isRecording() || span.spanContext().isRemote === true;
}

/** Records `err` on `span` (exception event, error status, `error.type`). */
export function failSpan(span: Span, err: unknown, type?: string): void {
  const e = err instanceof Error ? err : new Error(String(err));
  span.recordException(e);
  span.setStatus({ code: SpanStatusCode.ERROR, message: e.message });
  span.setAttribute('error.type', type ?? (e.name || 'Error'));
}

/**
 * Runs `fn` inside a new span (child of the active one) and ends it when `fn` settles; `fn`
 * gets the span to add attributes. Without tracing, `fn` runs as is (with `undefined`).
 */
export async function inSpan<T>(
  name: string,
  opts: { kind?: SpanKind; attributes?: Attributes; parent?: Context },
  fn: (span: Span | undefined) => Promise<T>,
): Promise<T> {
  if (!tracer) return fn(undefined);
  const parent = opts.parent ?? context.active();
  if (!recordsUnder(parent)) return fn(undefined);
  const span = tracer.startSpan(
    name,
    { kind: opts.kind ?? SpanKind.INTERNAL, attributes: opts.attributes },
    parent,
  );
  try {
    return await context.with(trace.setSpan(parent, span), () => fn(span));
  } catch (err) {
    failSpan(span, err);
    throw err;
  } finally {
    span.end();
  }
}

/** The active span's context as a W3C `traceparent` (to store on a run), or null. */
export function currentTraceparent(): string | null {
  if (!tracer) return null;
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent ?? null;
}

/** The context a stored or received `traceparent` continues (the root context when none). */
export function contextFromTraceparent(traceparent: string | null | undefined): Context {
  if (!traceparent) return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, { traceparent });
}

/** Adds the active context's `traceparent` (and `tracestate`) to outgoing headers. */
export function injectTraceHeaders(set: (name: string, value: string) => void): void {
  if (!tracer) return;
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  for (const k in carrier) set(k, carrier[k] as string);
}

/** pino `mixin`: the active span's ids on every log line written while it is active. */
export function traceLogFields(): Record<string, string> {
  const span = trace.getActiveSpan();
  if (!span) return {};
  const c = span.spanContext();
  return { trace_id: c.traceId, span_id: c.spanId };
}

/** Adds `traceparent` to a request made on Node's HTTP client, before its headers go out. */
export function traceOutgoing(req: {
  setHeader(name: string, value: string): unknown;
  headersSent?: boolean;
}): void {
  if (!tracer || req.headersSent) return;
  injectTraceHeaders((name, value) => req.setHeader(name, value));
}

const NO_HEADERS: Record<string, string> = Object.freeze({}) as Record<string, string>;

/** `traceparent` (and `tracestate`) of the active context as headers; empty without tracing. */
export function traceHeaders(): Record<string, string> {
  if (!tracer) return NO_HEADERS;
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier;
}
