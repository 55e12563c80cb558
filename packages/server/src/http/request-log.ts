import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Request } from 'express';
import type { Logger } from 'pino';
import type { ServerDeps } from '../context.js';
import { TRACE_IDS, type TracedRequest } from '../telemetry/http.js';

const PROBES = new Set(['/healthz', '/readyz']);
const LOGGED = Symbol('access logged');
type Logged = IncomingMessage & { [LOGGED]?: boolean };

/**
 * One access-log line when the response is done (or the connection closed before), with only
 * method, url (path only: query strings can carry signatures and tokens), status,
 * responseTime (ms), requestId and workspaceId: no headers, no bodies. Level by outcome:
 * error for 5xx and cut-off responses, warn for 4xx, info otherwise. Probes are not logged.
 * Costs one listener and, when the level is enabled, one line: it runs on every request,
 * the `/chat` hot path included.
 */
export function logAccess(log: Logger, req: IncomingMessage, res: ServerResponse): void {
  // Once per request: the fast path logs before it may hand the request to express.
  if ((req as Logged)[LOGGED]) return;
  (req as Logged)[LOGGED] = true;
  const url = (req as Request).originalUrl ?? req.url ?? '';
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  if (PROBES.has(path) || !log.isLevelEnabled('error')) return;
  const started = performance.now();
  res.once('close', () => {
    const r = req as Request;
    const status = res.statusCode;
    const failed = !res.writableFinished;
    const level = failed || status >= 500 ? 'error' : status >= 400 ? 'warn' : 'info';
    if (!log.isLevelEnabled(level)) return;
    log[level](
      {
        requestId: r.requestId,
        method: req.method,
        url: path,
        status,
        responseTime: Math.round(performance.now() - started),
        workspaceId: r.principal?.workspaceId,
        ...(req as TracedRequest)[TRACE_IDS],
        ...(failed ? { err: { message: 'response not completed' } } : {}),
      },
      failed || status >= 500 ? 'request failed' : 'request completed',
    );
  });
}

export function requestLog(deps: ServerDeps) {
  return (req: Request, res: ServerResponse, next: () => void) => {
    logAccess(deps.log, req, res);
    next();
  };
}
