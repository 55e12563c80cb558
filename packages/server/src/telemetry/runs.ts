import { context, SpanKind, trace } from '@opentelemetry/api';
import { contextFromTraceparent, failSpan, tracer } from './tracing.js';

/**
 * Runs one execution of a run inside an `invoke_agent` span that continues the trace of the
 * request that created the run (its stored `traceparent`), so an agent turn or autonomous run
 * is one trace from the SSE request through the run engine, in whichever process claims it.
 * Without a stored context the span is a child of the active one. Without tracing, `fn` runs
 * as is.
 */
export function inRunSpan<T>(
  run: { id: string; kind: string; attempts: number; traceParent?: string | null },
  fn: () => Promise<T>,
): Promise<T> {
  const t = tracer;
  if (!t) return fn();
  const parent = run.traceParent ? contextFromTraceparent(run.traceParent) : context.active();
  const span = t.startSpan(
    'invoke_agent',
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        'gen_ai.operation.name': 'invoke_agent',
        'aisuite.run.id': run.id,
        'aisuite.run.kind': run.kind,
        'aisuite.run.attempt': run.attempts,
      },
    },
    parent,
  );
  return context.with(trace.setSpan(parent, span), fn).then(
    (v) => {
      span.end();
      return v;
    },
    (err) => {
      failSpan(span, err);
      span.end();
      throw err;
    },
  );
}

/**
 * Runs a tool call inside an `execute_tool <name>` span (GenAI conventions: `gen_ai.tool.name`,
 * `gen_ai.tool.call.id`, `gen_ai.tool.type`); arguments and result only with content capture.
 */
export async function inToolSpan<T>(
  tool: { name: string; callId: string; type: string },
  fn: () => Promise<T>,
): Promise<T> {
  const t = tracer;
  if (!t) return fn();
  const parent = context.active();
  const span = t.startSpan(
    `execute_tool ${tool.name}`,
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': tool.name,
        'gen_ai.tool.call.id': tool.callId,
        'gen_ai.tool.type': tool.type,
      },
    },
    parent,
  );
  try {
    return await context.with(trace.setSpan(parent, span), fn);
  } catch (err) {
    failSpan(span, err);
    throw err;
  } finally {
    span.end();
  }
}
