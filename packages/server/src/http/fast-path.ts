import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { Express } from 'express';
import type { ServerDeps } from '../context.js';
import { sendError, toAppError } from './errors.js';
import { rawRouteModules } from './raw-routes.js';
import { assignRequestId } from './request-id.js';
import { logAccess } from './request-log.js';
import { apiSecurityHeaders } from './security.js';

/**
 * The HTTP server's request listener: the raw routes' `fast` entries (`POST /api/v1/chat`)
 * are answered here, everything else by the express app. On the fast path a request costs
 * what it must (request id, access log, the security headers helmet sets under `/api/v1`,
 * copied once) and none of the router, middleware chain or prototype swaps; under load that
 * is a measurable share of the gateway's CPU per stream (bench/README.md).
 */
export function createRequestListener(app: Express, deps: ServerDeps): RequestListener {
  const routes = new Map<string, (req: IncomingMessage, res: ServerResponse) => Promise<void>>();
  for (const mod of rawRouteModules) {
    for (const r of mod.fast ?? []) routes.set(`${r.method} /api/v1${r.path}`, r.handler(deps));
  }
  const security = Object.entries(apiSecurityHeaders());
  return (req, res) => {
    const url = req.url ?? '';
    const q = url.indexOf('?');
    const handler = routes.get(`${req.method} ${q === -1 ? url : url.slice(0, q)}`);
    if (!handler) {
      app(req, res);
      return;
    }
    assignRequestId(req, res);
    logAccess(deps.log, req, res);
    for (const [name, value] of security) res.setHeader(name, value);
    handler(req, res).catch((err: unknown) => {
      deps.log.error({ err, requestId: (req as { requestId?: string }).requestId }, 'request failed');
      sendError(res, toAppError(err));
    });
  };
}
