import type { TRPCError } from '@trpc/server';
import type { NextFunction, Request, Response } from 'express';
import { createOpenApiExpressMiddleware, type OpenApiRouter } from 'trpc-to-openapi';
import type { ServerDeps } from '../context.js';
import { AppError, appError, validationError } from '../errors/index.js';
import type { Meta, RequestContext } from '../trpc.js';
import { toAppError } from './errors.js';

const TRPC_ERROR = Symbol('trpcError');
type WithError = Request & { [TRPC_ERROR]?: TRPCError };

function fromTrpcError(err: TRPCError): AppError {
  const cause = err.cause as unknown;
  if (cause instanceof AppError) return cause;
  if (cause && (cause as Error).name === 'ZodError') {
    return validationError((cause as { issues: Parameters<typeof validationError>[0] }).issues);
  }
  switch (err.code) {
    case 'NOT_FOUND':
      return appError('NOT_FOUND');
    case 'PARSE_ERROR':
    case 'UNSUPPORTED_MEDIA_TYPE':
    case 'BAD_REQUEST':
      return appError('INVALID_REQUEST_BODY');
    case 'PAYLOAD_TOO_LARGE':
      return appError('REQUEST_BODY_TOO_LARGE');
    case 'METHOD_NOT_SUPPORTED':
      return appError('NOT_FOUND');
    default:
      return toAppError(cause ?? err);
  }
}

/** Success statuses other than 200, keyed by procedure path (from `meta.status`). */
function collectStatuses(router: OpenApiRouter): Map<string, number> {
  const out = new Map<string, number>();
  const procs = (router._def as { procedures: Record<string, { _def: { meta?: Meta } }> }).procedures;
  for (const [path, proc] of Object.entries(procs)) {
    const status = proc._def.meta?.status;
    if (status) out.set(path, status);
  }
  return out;
}

/**
 * trpc-to-openapi's middleware validates the router, whenever `NODE_ENV` is not `production`,
 * by generating the whole OpenAPI document and throwing it away: ~0.1–0.5 s of every start
 * (and of every test server). The same document is generated, and so validated, by
 * `pnpm openapi` (checked for drift in CI), by `GET /api/v1/openapi.json` and by the tests
 * that walk it, so that redundant pass is skipped (docs/decisions/0019-lean-embedded-database.md).
 */
function withoutRouterValidation<T>(create: () => T): T {
  const nodeEnv = process.env.NODE_ENV;
  process.env.NODE_ENV = 'production';
  try {
    return create();
  } finally {
    if (nodeEnv === undefined) delete process.env.NODE_ENV;
    else process.env.NODE_ENV = nodeEnv;
  }
}

/** Largest JSON body of a tRPC operation (bytes). */
export const OPENAPI_MAX_BODY = 1024 * 1024;

/**
 * trpc-to-openapi's express middleware with our error body. The library writes
 * `{message, code, issues}` and offers no hook to change it, so this narrow wrapper
 * rewrites the body of failed responses, once, into `{error, code?, details?}`.
 */
export function openApiHandler(router: OpenApiRouter, deps: ServerDeps) {
  const statuses = collectStatuses(router);
  const handler = withoutRouterValidation(() =>
    createOpenApiExpressMiddleware({
      router,
      maxBodySize: OPENAPI_MAX_BODY,
      createContext: ({ req, res }): RequestContext => ({
        req,
        res,
        deps,
        em: deps.em(),
        requestId: req.requestId ?? '',
        responseHeaders: {},
      }),
      onError: ({ error, req }) => {
        (req as WithError)[TRPC_ERROR] = error;
      },
      responseMeta: ({ ctx, paths, errors }) => {
        if (errors.length > 0) return {};
        const status = paths?.[0] ? statuses.get(paths[0]) : undefined;
        return { status, headers: (ctx as RequestContext | undefined)?.responseHeaders };
      },
    }),
  );

  return async (req: Request, res: Response, next: NextFunction) => {
    const end = res.end.bind(res) as (...args: unknown[]) => Response;
    res.end = ((...args: unknown[]) => {
      const trpcErr = (req as WithError)[TRPC_ERROR];
      if (trpcErr && !res.headersSent) {
        const appErr = fromTrpcError(trpcErr);
        if (appErr.status >= 500) deps.log.error({ err: trpcErr.cause ?? trpcErr }, 'request failed');
        res.statusCode = appErr.status;
        if (appErr.headers) for (const [k, v] of Object.entries(appErr.headers)) res.setHeader(k, v);
        res.setHeader('Content-Type', 'application/json; charset=utf-8');
        return end(JSON.stringify(appErr.toBody()));
      }
      return end(...args);
    }) as Response['end'];
    try {
      await handler(req, res);
    } catch (err) {
      next(err);
    }
  };
}
