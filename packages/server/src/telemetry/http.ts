import type { IncomingMessage, RequestListener } from 'node:http';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { metrics } from './metrics.js';
import { tracer } from './tracing.js';

const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'TRACE', 'CONNECT']);

/** Where the request ids of the span live for the access log line (written outside the span's context). */
export const TRACE_IDS = Symbol('trace ids');
export type TracedRequest = IncomingMessage & { [TRACE_IDS]?: { trace_id: string; span_id: string } };

/**
 * Wraps the HTTP server's request listener with the request's metrics and server span, when
 * either is on; otherwise returns `listener` itself (no cost per request). Every request is
 * observed when its response closes (an event stream when it ends):
 * `http_server_request_duration_seconds{http_request_method,http_route,http_response_status_code}`,
 * and a SERVER span continuing an incoming W3C `traceparent`, named `<METHOD> <route>`, with
 * `http.request.method`, `http.route`, `url.path`, `http.response.status_code`, and the
 * request's handling (fast path or express) running inside it.
 */
export function instrumentListener(
  listener: RequestListener,
  routeOf: (path: string) => string,
): RequestListener {
  const m = metrics;
  const t = tracer;
  if (!m && !t) return listener;
  return (req, res) => {
    const started = performance.now();
    const url = req.url ?? '';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const method = METHODS.has(req.method ?? '') ? (req.method as string) : '_OTHER';
    const span = t?.startSpan(
      method,
      {
        kind: SpanKind.SERVER,
        attributes: { 'http.request.method': method, 'url.path': path },
      },
      // Only a caller's trace context (or baggage) is worth extracting.
      req.headers.traceparent === undefined && req.headers.baggage === undefined
        ? ROOT_CONTEXT
        : propagation.extract(ROOT_CONTEXT, req.headers),
    );
    if (span) {
      const c = span.spanContext();
      (req as TracedRequest)[TRACE_IDS] = { trace_id: c.traceId, span_id: c.spanId };
    }
    res.once('close', () => {
      const route = routeOf(path);
      const status = res.statusCode;
      m?.httpDuration.observe(
        { http_request_method: method, http_route: route, http_response_status_code: String(status) },
        (performance.now() - started) / 1000,
      );
      if (span) {
        span.updateName(`${method} ${route}`);
        span.setAttribute('http.route', route);
        span.setAttribute('http.response.status_code', status);
        if (status >= 500 || !res.writableFinished) {
          span.setStatus({ code: SpanStatusCode.ERROR });
          span.setAttribute('error.type', res.writableFinished ? String(status) : 'response_not_completed');
        }
        span.end();
      }
    });
    if (span) context.with(trace.setSpan(ROOT_CONTEXT, span), () => listener(req, res));
    else listener(req, res);
  };
}
