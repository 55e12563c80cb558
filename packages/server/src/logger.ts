import { type Logger, pino } from 'pino';

/**
 * The service's JSON logger. `mixin` adds fields to every line: with tracing on, the
 * composition root passes one that adds the active span's `trace_id` and `span_id`.
 */
export function createLogger(level: string, opts: { mixin?: () => Record<string, unknown> } = {}): Logger {
  return pino({
    level,
    ...(opts.mixin ? { mixin: opts.mixin } : {}),
    base: { service: 'ai-suite' },
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', '*.apiKey', '*.password'],
      censor: '[redacted]',
    },
    timestamp: pino.stdTimeFunctions.isoTime,
  });
}
