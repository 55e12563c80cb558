import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Router } from 'express';
import type { ZodOpenApiPathsObject } from 'zod-openapi';
import type { ServerDeps } from '../context.js';
import { agentRoutes } from '../domains/agents/routes.js';
import { appsRawRoutes } from '../domains/apps/routes.js';
import { artifactRoutes } from '../domains/artifacts/routes.js';
import { chatRoutes } from '../domains/chat/routes.js';
import { oidcRoutes } from '../domains/identity/oidc-routes.js';
import { imageRoutes } from '../domains/image/routes.js';
import { openAiRoutes } from '../domains/openai/routes.js';
import { ragRoutes } from '../domains/rag/routes.js';
import { storageRoutes } from '../domains/storage/routes.js';

/**
 * Routes trpc-to-openapi cannot express (SSE, multipart, file streams): plain express
 * handlers mounted under /api/v1 before the tRPC handler, described in the same OpenAPI
 * document through `openapi`.
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

/** Every raw route module. Domains append theirs here. */
export const rawRouteModules: RawRouteModule[] = [
  chatRoutes,
  storageRoutes,
  appsRawRoutes,
  agentRoutes,
  artifactRoutes,
  imageRoutes,
  ragRoutes,
  oidcRoutes,
  openAiRoutes,
];
