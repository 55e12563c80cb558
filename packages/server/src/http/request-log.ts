import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Request } from 'express';
import { pinoHttp } from 'pino-http';
import type { ServerDeps } from '../context.js';

/** One access-log line per request, with only these fields (no headers, no bodies, no query). */
function summary(req: IncomingMessage, res: ServerResponse, responseTime: unknown) {
  const r = req as Request;
  const url = r.originalUrl ?? req.url ?? '';
  const q = url.indexOf('?');
  return {
    method: req.method,
    // Query strings can carry signatures and tokens: log the path only.
    url: q === -1 ? url : url.slice(0, q),
    status: res.statusCode,
    responseTime,
    workspaceId: r.principal?.workspaceId,
  };
}

/**
 * Structured access log (pino-http), reduced to method, url, status, responseTime,
 * requestId and workspaceId. The request id is bound to `req.log`, so anything a handler
 * logs through it carries the id too. Probes are not logged.
 */
export function requestLog(deps: ServerDeps) {
  return pinoHttp({
    logger: deps.log,
    genReqId: (req) => (req as Request).requestId ?? '',
    customAttributeKeys: { reqId: 'requestId' },
    quietReqLogger: true,
    quietResLogger: true,
    autoLogging: { ignore: (req) => req.url === '/healthz' || req.url === '/readyz' },
    customLogLevel: (_req, res, err) =>
      err || res.statusCode >= 500 ? 'error' : res.statusCode >= 400 ? 'warn' : 'info',
    customSuccessMessage: () => 'request completed',
    customErrorMessage: () => 'request failed',
    customSuccessObject: (req, res, val: { responseTime?: unknown }) => summary(req, res, val.responseTime),
    customErrorObject: (req, res, err, val: { responseTime?: unknown }) => ({
      ...summary(req, res, val.responseTime),
      // A 5xx without a thrown error gets pino-http's synthetic "failed with status code";
      // the handler that failed has already logged the real error with its stack.
      err: { message: err.message },
    }),
  });
}
