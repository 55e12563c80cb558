import { context, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { metrics } from './metrics.js';
import { captureContent, recordsUnder, tracer } from './tracing.js';

/**
 * One model call observed by the GenAI conventions: a CLIENT span `<operation> <model>` (child
 * of the active span, active while the call runs so the upstream request carries its
 * `traceparent`) and the `gen_ai_*` metrics. Created by the instrumented provider
 * (providers/instrumented-llm.ts) only when metrics or tracing are on.
 */
export interface GenAiCall {
  /** Whether the output goes on the span (content capture on and the call traced): only then is it worth collecting. */
  readonly capturesContent: boolean;
  /** Runs the upstream request inside the call's span. */
  run<T>(fn: () => Promise<T>): Promise<T>;
  /** The first token arrived (`gen_ai_server_time_to_first_token_seconds`). */
  firstToken(): void;
  end(result: {
    inputTokens?: number;
    outputTokens?: number;
    /** Reported by the upstream (an estimate is kept out of the token histogram). */
    reported: boolean;
    responseModel?: string;
    finishReasons?: string[];
    output?: unknown;
  }): void;
  fail(err: unknown): void;
}

export interface GenAiCallInfo {
  operation: 'chat' | 'embeddings' | 'image';
  model: string;
  provider: string;
  streaming?: boolean;
  temperature?: number;
  maxTokens?: number;
  /** Prompt messages, put on the span only with content capture on. */
  input?: unknown;
}

/** A bounded `error.type` for an error: the HTTP status of an upstream error, else its name. */
export function errorType(err: unknown): string {
  const e = err as { status?: unknown; name?: unknown } | undefined;
  if (e && typeof e.status === 'number') return String(e.status);
  if (e && (e.name === 'AbortError' || e.name === 'APIUserAbortError')) return 'cancelled';
  return typeof e?.name === 'string' && /^[A-Za-z]{1,40}$/.test(e.name) ? e.name : '_OTHER';
}

export function startGenAiCall(info: GenAiCallInfo): GenAiCall {
  const started = performance.now();
  const m = metrics;
  const labels = {
    gen_ai_operation_name: info.operation,
    gen_ai_request_model: info.model,
    gen_ai_provider_name: info.provider,
  };
  const parent = context.active();
  const t = tracer;
  const span: Span | undefined =
    t && recordsUnder(parent)
      ? t.startSpan(
          `${info.operation} ${info.model}`,
          {
            kind: SpanKind.CLIENT,
            attributes: {
              'gen_ai.operation.name': info.operation,
              'gen_ai.provider.name': info.provider,
              'gen_ai.request.model': info.model,
              'gen_ai.request.temperature': info.temperature,
              'gen_ai.request.max_tokens': info.maxTokens,
              'aisuite.streaming': info.streaming || undefined,
              'gen_ai.input.messages':
                captureContent && info.input !== undefined ? JSON.stringify(info.input) : undefined,
            },
          },
          parent,
        )
      : undefined;
  let first = true;
  let done = false;
  return {
    capturesContent: captureContent && span !== undefined,
    run(fn) {
      return span ? context.with(trace.setSpan(parent, span), fn) : fn();
    },
    firstToken() {
      if (!first) return;
      first = false;
      const s = (performance.now() - started) / 1000;
      m?.ttft.observe(labels, s);
      span?.setAttribute('aisuite.time_to_first_token_seconds', s);
    },
    end(r) {
      if (done) return;
      done = true;
      m?.genAiDuration.observe({ ...labels, error_type: '' }, (performance.now() - started) / 1000);
      if (m && r.reported) {
        if (r.inputTokens !== undefined)
          m.genAiTokens.observe({ ...labels, gen_ai_token_type: 'input' }, r.inputTokens);
        if (r.outputTokens !== undefined && info.operation !== 'embeddings') {
          m.genAiTokens.observe({ ...labels, gen_ai_token_type: 'output' }, r.outputTokens);
        }
      }
      if (!span) return;
      if (r.responseModel) span.setAttribute('gen_ai.response.model', r.responseModel);
      if (r.inputTokens !== undefined) span.setAttribute('gen_ai.usage.input_tokens', r.inputTokens);
      if (r.outputTokens !== undefined) span.setAttribute('gen_ai.usage.output_tokens', r.outputTokens);
      if (!r.reported) span.setAttribute('aisuite.usage.estimated', true);
      if (r.finishReasons) span.setAttribute('gen_ai.response.finish_reasons', r.finishReasons);
      if (captureContent && r.output !== undefined)
        span.setAttribute('gen_ai.output.messages', JSON.stringify(r.output));
      span.end();
    },
    fail(err) {
      if (done) return;
      done = true;
      const type = errorType(err);
      m?.genAiDuration.observe({ ...labels, error_type: type }, (performance.now() - started) / 1000);
      if (!span) return;
      span.recordException(err instanceof Error ? err : new Error(String(err)));
      span.setStatus({
        code: SpanStatusCode.ERROR,
        message: err instanceof Error ? err.message : String(err),
      });
      span.setAttribute('error.type', type);
      span.end();
    },
  };
}

/** Whether model calls are observed at all (metrics or tracing on). */
export const genAiObserved = (): boolean => metrics !== undefined || tracer !== undefined;
