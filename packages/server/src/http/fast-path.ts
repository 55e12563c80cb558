import type { RequestListener } from 'node:http';
import type { Express } from 'express';
import type { ServerDeps } from '../context.js';
import { sendError, toAppError } from './errors.js';
import type { FastHandler, RawRouteModule } from './raw-routes.js';
import { assignRequestId } from './request-id.js';
import { logAccess } from './request-log.js';
import { apiSecurityHeaders } from './security.js';

interface PatternRoute {
  method: string;
  /** The path's segments; `undefined` where a `:param` stands. */
  segments: (string | undefined)[];
  names: string[];
  /** The path up to its first parameter: a cheap test before the segments are compared. */
  prefix: string;
  handler: FastHandler;
}

const NO_PARAMS: Record<string, string> = Object.freeze({}) as Record<string, string>;

/** The pattern route `path` matches, with its parameters (raw: not percent-decoded). */
function matchPattern(
  routes: PatternRoute[],
  method: string,
  path: string,
): { handler: FastHandler; params: Record<string, string> } | undefined {
  for (const r of routes) {
    if (r.method !== method || !path.startsWith(r.prefix)) continue;
    const parts = path.split('/');
    if (parts.length !== r.segments.length) continue;
    const params: Record<string, string> = {};
    let ok = true;
    for (let i = 0, n = 0; i < parts.length; i++) {
      const want = r.segments[i];
      const part = parts[i] as string;
      if (want === undefined) {
        if (part === '') {
          ok = false;
          break;
        }
        params[r.names[n++] as string] = part;
      } else if (want !== part) {
        ok = false;
        break;
      }
    }
    if (ok) return { handler: r.handler, params };
  }
  return undefined;
}

/**
 * The HTTP server's request listener: the raw routes' `fast` entries (`POST /api/v1/chat`, an
 * agent turn) are answered here, everything else by the express app. On the fast path a
 * request costs what it must (request id, access log, the security headers helmet sets under
 * `/api/v1`, copied once) and none of the router, middleware chain or prototype swaps; under
 * load that is a measurable share of the gateway's CPU per stream (bench/README.md). A fast
 * handler that finds the request is not its case hands it to express (`next`), which answers
 * it as if it had come first (the request id and access log are not repeated; a body already
 * read stays parsed).
 */
export function createRequestListener(
  app: Express,
  deps: ServerDeps,
  rawRouteModules: readonly RawRouteModule[],
): RequestListener {
  const exact = new Map<string, FastHandler>();
  const patterns: PatternRoute[] = [];
  for (const mod of rawRouteModules) {
    for (const r of mod.fast ?? []) {
      const path = `/api/v1${r.path}`;
      const handler = r.handler(deps);
      if (!path.includes('/:')) {
        exact.set(`${r.method} ${path}`, handler);
        continue;
      }
      const segments = path.split('/').map((s) => (s.startsWith(':') ? undefined : s));
      const names = path
        .split('/')
        .filter((s) => s.startsWith(':'))
        .map((s) => s.slice(1));
      patterns.push({
        method: r.method,
        segments,
        names,
        prefix: path.slice(0, path.indexOf('/:') + 1),
        handler,
      });
    }
  }
  const security = Object.entries(apiSecurityHeaders());
  return (req, res) => {
    const url = req.url ?? '';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const method = req.method ?? '';
    let handler = exact.get(`${method} ${path}`);
    let params = NO_PARAMS;
    if (!handler && patterns.length > 0) {
      const m = matchPattern(patterns, method, path);
      if (m) ({ handler, params } = m);
    }
    if (!handler) {
      app(req, res);
      return;
    }
    assignRequestId(req, res);
    logAccess(deps.log, req, res);
    for (const [name, value] of security) res.setHeader(name, value);
    handler(req, res, { params, next: () => app(req, res) }).catch((err: unknown) => {
      deps.log.error({ err, requestId: (req as { requestId?: string }).requestId }, 'request failed');
      if (!res.headersSent) sendError(res, toAppError(err));
      else res.destroy();
    });
  };
}
