import type { EntityManager } from '@mikro-orm/postgresql';
import { initTRPC } from '@trpc/server';
import type { Request, Response } from 'express';
import type { OpenApiMeta } from 'trpc-to-openapi';
import {
  API_KEY,
  API_KEY_OR_SESSION,
  type AuthPolicy,
  authenticate,
  authenticateSession,
  type PrincipalKind,
  SESSION,
} from './auth/authenticate.js';
import type { ServerDeps } from './context.js';
import './http/express-augment.js';

export interface RequestContext {
  req: Request;
  res: Response;
  deps: ServerDeps;
  em: EntityManager;
  requestId: string;
  /** Headers a procedure wants on its successful response (e.g. Retry-After). */
  responseHeaders: Record<string, string>;
}

export type Meta = OpenApiMeta<{
  /** success status, 200 when unset */
  status?: number;
  /** The principal kinds the procedure accepts (empty: public). Set by the procedure builders below. */
  principals?: readonly PrincipalKind[];
}>;

const t = initTRPC.context<RequestContext>().meta<Meta>().create();

export const router = t.router;
export const middleware = t.middleware;
/** No credentials (public catalogs, sign-in). */
export const publicProcedure = t.procedure.meta({ principals: [] });

/**
 * A procedure that accepts the principal kinds of `policy`: the one way a procedure declares
 * who may call it. The kinds are recorded in its meta, for the OpenAPI document's `security`
 * and the test that walks every operation.
 */
export function procedureFor(policy: AuthPolicy) {
  return t.procedure.meta({ principals: policy.kinds }).use(async ({ ctx, next }) => {
    const principal = await authenticate(ctx.req, ctx.deps, ctx.em, policy);
    return next({ ctx: { ...ctx, principal } });
  });
}

/** Workspace API key only. */
export const keyProcedure = procedureFor(API_KEY);
/** A person's session acting in its workspace only (RAG, key management, members, tool servers). */
export const sessionProcedure = procedureFor(SESSION);
/** A key or a session (storage). */
export const keyOrSessionProcedure = procedureFor(API_KEY_OR_SESSION);

/** A signed-in person, whether or not the session has a workspace (the `/auth` routes). */
export const signedInProcedure = t.procedure
  .meta({ principals: SESSION.kinds })
  .use(async ({ ctx, next }) => {
    const session = await authenticateSession(ctx.req, ctx.deps, ctx.em);
    return next({ ctx: { ...ctx, session } });
  });
