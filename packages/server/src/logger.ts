import { type Logger, pino } from 'pino';
import { traceLogFields } from './telemetry/tracing.js';

/**
 * The service's JSON logger. With `traceIds` (tracing on) every line written while a span is
 * active carries its `trace_id` and `span_id`.
 */
export function createLogger(level: string, opts: { traceIds?: boolean } = {}): Logger {
  return pino({
    level,
    ...(opts.traceIds ? { mixin: traceLogFields } : {}),
    base: { service: 'ai-suite' },
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', '*.apiKey', '*.password'],
      censor: '[redacted]',
    },
    timestamp: pino.stdTimeFunctions.isoTime,
  });
}
