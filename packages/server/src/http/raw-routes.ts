import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Router } from 'express';
import type { ZodOpenApiPathsObject } from 'zod-openapi';
import type { ServerDeps } from '../context.js';

/**
 * Routes trpc-to-openapi cannot express (SSE, multipart, file streams): plain express
 * handlers mounted under /api/v1 before the tRPC handler, described in the same OpenAPI
 * document through `openapi`. The composition root lists them (`src/routes.ts`).
 */
export interface RawRouteModule {
  name: string;
  mount(router: Router, deps: ServerDeps): void;
  /**
   * Hot routes the HTTP server answers before express (`http/fast-path.ts`), with the same
   * request id, access log and security headers. `mount` must serve them too (an app used
   * without `createServer`'s listener, other spellings of the path).
   */
  fast?: FastRoute[];
  openapi: ZodOpenApiPathsObject;
}

export interface FastRoute {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /**
   * Path under `/api/v1`: exact, or with `:name` segments (each one non-empty path segment,
   * handed over raw, not percent-decoded). Any other spelling goes to express.
   */
  path: string;
  handler(deps: ServerDeps): FastHandler;
}

export interface FastContext {
  params: Record<string, string>;
  /**
   * Hands the request to the express app, which answers it as if it had come first: for a
   * request the fast handler is not the place for. A body it already read stays parsed
   * (`req.body`); express's body parser skips a request whose stream has ended.
   */
  next(): void;
}

export type FastHandler = (req: IncomingMessage, res: ServerResponse, ctx: FastContext) => Promise<void>;

/** Mounts every raw route module on the `/api/v1` router (before the tRPC handler). */
export function mountRawRoutes(router: Router, modules: readonly RawRouteModule[], deps: ServerDeps): void {
  for (const mod of modules) mod.mount(router, deps);
}
