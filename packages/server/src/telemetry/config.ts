/**
 * What the standard `OTEL_*` variables ask of tracing, read without loading any OpenTelemetry
 * code: `undefined` when tracing is off (`OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`,
 * or no OTLP endpoint configured).
 */
export interface TracingConfig {
  /** Where spans are posted (`…/v1/traces`). */
  url: string;
  protocol: 'http/protobuf' | 'http/json';
  headers: Record<string, string>;
  serviceName: string;
  resourceAttributes: Record<string, string>;
  sampler: string;
  samplerArg?: string;
  captureContent: boolean;
}

export class TelemetryConfigError extends Error {}

/** `k=v,k2=v2` with percent-encoded values (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES). */
function keyValues(v: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (v ?? '').split(',')) {
    const i = part.indexOf('=');
    if (i <= 0) continue;
    const k = part.slice(0, i).trim();
    try {
      out[k] = decodeURIComponent(part.slice(i + 1).trim());
    } catch {
      out[k] = part.slice(i + 1).trim();
    }
  }
  return out;
}

const SAMPLERS = new Set([
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
]);

export function tracingConfigFromEnv(env: Record<string, string | undefined>): TracingConfig | undefined {
  const val = (k: string) => {
    const v = env[k]?.trim();
    return v ? v : undefined;
  };
  if (val('OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return undefined;
  const exporter = val('OTEL_TRACES_EXPORTER');
  if (exporter === 'none') return undefined;
  if (exporter && exporter !== 'otlp') {
    throw new TelemetryConfigError(`OTEL_TRACES_EXPORTER must be otlp or none, got "${exporter}"`);
  }
  const tracesEndpoint = val('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const base = val('OTEL_EXPORTER_OTLP_ENDPOINT');
  if (!tracesEndpoint && !base) return undefined;
  const url = tracesEndpoint ?? `${(base as string).replace(/\/+$/, '')}/v1/traces`;
  const protocol =
    val('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ?? val('OTEL_EXPORTER_OTLP_PROTOCOL') ?? 'http/protobuf';
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') {
    throw new TelemetryConfigError(
      `OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or http/json, got "${protocol}"`,
    );
  }
  const sampler = val('OTEL_TRACES_SAMPLER') ?? 'parentbased_always_on';
  if (!SAMPLERS.has(sampler)) {
    throw new TelemetryConfigError(
      `OTEL_TRACES_SAMPLER must be one of ${[...SAMPLERS].join(', ')}, got "${sampler}"`,
    );
  }
  return {
    url,
    protocol,
    headers: {
      ...keyValues(val('OTEL_EXPORTER_OTLP_HEADERS')),
      ...keyValues(val('OTEL_EXPORTER_OTLP_TRACES_HEADERS')),
    },
    serviceName: val('OTEL_SERVICE_NAME') ?? 'ai-suite',
    resourceAttributes: keyValues(val('OTEL_RESOURCE_ATTRIBUTES')),
    sampler,
    samplerArg: val('OTEL_TRACES_SAMPLER_ARG'),
    captureContent: val('OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT')?.toLowerCase() === 'true',
  };
}
