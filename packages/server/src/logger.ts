import { type Logger, pino } from 'pino';

export function createLogger(level: string): Logger {
  return pino({
    level,
    base: { service: 'ai-suite' },
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', '*.apiKey', '*.password'],
      censor: '[redacted]',
    },
    timestamp: pino.stdTimeFunctions.isoTime,
  });
}
