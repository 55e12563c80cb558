import type { EntityManager } from '@mikro-orm/postgresql';
import { initTRPC } from '@trpc/server';
import type { Request, Response } from 'express';
import type { OpenApiMeta } from 'trpc-to-openapi';
import { bearerToken } from './auth/api-keys.js';
import type { Principal } from './auth/principal.js';
import type { ServerDeps } from './context.js';
import './http/express-augment.js';
import { resolveApiKey } from './domains/workspaces/service.js';
import { unauthorized } from './http/errors.js';

export interface RequestContext {
  req: Request;
  res: Response;
  deps: ServerDeps;
  em: EntityManager;
  requestId: string;
  /** Headers a procedure wants on its successful response (e.g. Retry-After). */
  responseHeaders: Record<string, string>;
}

export type Meta = OpenApiMeta<{ /** success status, 200 when unset */ status?: number }>;

const t = initTRPC.context<RequestContext>().meta<Meta>().create();

export const router = t.router;
export const middleware = t.middleware;
export const publicProcedure = t.procedure;

/** Resolves the `Authorization: Bearer svc_ai_…` header; 401 `Invalid API key` otherwise. */
export async function authenticateApiKey(req: Request, em: EntityManager): Promise<Principal> {
  const principal = await resolveApiKey(em, bearerToken(req.headers.authorization));
  if (!principal) throw unauthorized('Invalid API key');
  req.principal = principal;
  return principal;
}

export const keyProcedure = t.procedure.use(async ({ ctx, next }) => {
  const principal = await authenticateApiKey(ctx.req, ctx.em);
  return next({ ctx: { ...ctx, principal } });
});
