import { z } from 'zod';
import { sessionCookieAllowed, sessionCredential } from '../../auth/authenticate.js';
import { clearSessionCookie, setSessionCookie } from '../../auth/cookies.js';
import { signInThrottle } from '../../auth/throttle.js';
import { publicProcedure, type RequestContext, router, signedInProcedure } from '../../trpc.js';
import { OIDC_START_PATH } from './oidc-routes.js';
import {
  AuthProvidersSchema,
  AuthSessionSchema,
  ChangePasswordInput,
  PasswordChangedSchema,
  SessionListItemSchema,
  SignedInSchema,
  SignInInput,
  SwitchWorkspaceInput,
} from './schema.js';
import { type ClientInfo, IdentityService } from './service.js';

const tags = ['Auth'];

const service = (ctx: RequestContext) =>
  new IdentityService(ctx.em, ctx.deps.identity, signInThrottle(ctx.deps.db, ctx.deps.identity.signIn));

export const clientInfo = (ctx: RequestContext): ClientInfo => ({
  ip: ctx.req.ip ?? null,
  userAgent: ctx.req.headers['user-agent'] ?? null,
  previousToken: sessionCredential(ctx.req)?.token,
});

/**
 * Opens a session with `open` and sets its cookie when the request may have it
 * (`sessionCookieAllowed`, decided first: a foreign origin is refused before any work).
 */
export async function withCookie<T extends { token: string; session: { expiresAt: string } }>(
  ctx: RequestContext,
  open: () => Promise<T>,
): Promise<T> {
  const cookie = sessionCookieAllowed(ctx.req, ctx.deps);
  const body = await open();
  if (cookie) setSessionCookie(ctx.req, ctx.res, ctx.deps, body.token, new Date(body.session.expiresAt));
  return body;
}

export const identityRouter = router({
  providers: publicProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/auth/providers',
        tags,
        summary: 'How people can sign in here (for the sign-in page)',
        description:
          'Public. `oidc` is null unless `OIDC_ISSUER` is set; its `startUrl` is where a browser goes to sign in with the identity provider (add `?returnTo=<path on this site>`).',
      },
    })
    .input(z.void())
    .output(AuthProvidersSchema)
    .query(({ ctx }) => {
      const oidc = ctx.deps.identity.oidc;
      return {
        password: true,
        signUp: ctx.deps.identity.signupEnabled,
        oidc: oidc ? { name: oidc.providerName, startUrl: `/api/v1${OIDC_START_PATH}` } : null,
      };
    }),

  changePassword: signedInProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/auth/password',
        tags,
        protect: true,
        summary: 'Change your password (signs out your other sessions)',
        description:
          'Session only. `currentPassword` must be right (400 `INVALID_CURRENT_PASSWORD`; failures count like failed sign-ins, 429 once used up); `newPassword` has at least 8 characters (400 `WEAK_PASSWORD`). Every other session of yours is revoked; this one keeps working. An account that signs in only through the identity provider has no password (400 `NO_PASSWORD`).',
        errorResponses: {
          400: 'currentPassword is incorrect; Validation error',
          401: 'Authentication required',
          429: 'Too many failed attempts (Retry-After)',
        },
      },
    })
    .input(ChangePasswordInput)
    .output(PasswordChangedSchema)
    .mutation(({ ctx, input }) => service(ctx).changePassword(ctx.session, input, clientInfo(ctx))),

  signIn: publicProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/auth/sign-in',
        tags,
        summary: 'Sign in with email and password',
        description:
          'Opens a session: the token in the body is for `Authorization: Bearer …`; a browser request from a trusted origin (`PUBLIC_BASE_URL`, `AUTH_TRUSTED_ORIGINS`) also gets it as an HTTP-only `SameSite=Lax` cookie, one from any other origin is refused (403 `CSRF_REJECTED`), a request naming no origin gets no cookie. An unknown email and a wrong password both answer 401 `Invalid email or password`. A session the request carried is revoked.',
        errorResponses: {
          400: 'Validation error',
          401: 'Invalid email or password',
          403: 'Access denied to workspace (workspaceId is not one of the user’s); a sign-in from an untrusted origin (CSRF_REJECTED)',
          429: 'Too many failed sign-ins for this account or address (Retry-After)',
        },
      },
    })
    .input(SignInInput)
    .output(SignedInSchema)
    .mutation(async ({ ctx, input }) =>
      withCookie(ctx, () => service(ctx).signInWithPassword(input, clientInfo(ctx))),
    ),

  signOut: signedInProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/auth/sign-out',
        tags,
        protect: true,
        summary: 'Sign out: revoke this session and clear its cookie',
        errorResponses: { 401: 'Authentication required' },
      },
    })
    .input(z.void())
    .output(z.object({ signedOut: z.literal(true) }))
    .mutation(async ({ ctx }) => {
      await service(ctx).signOut(ctx.session);
      clearSessionCookie(ctx.req, ctx.res, ctx.deps);
      return { signedOut: true as const };
    }),

  session: signedInProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/auth/session',
        tags,
        protect: true,
        summary: 'The session of this request: user, workspace and role, expiry',
        errorResponses: { 401: 'Authentication required' },
      },
    })
    .input(z.void())
    .output(AuthSessionSchema)
    .query(({ ctx }) => service(ctx).describe(ctx.session)),

  switchWorkspace: signedInProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/auth/workspace',
        tags,
        protect: true,
        summary: 'Act in another of your workspaces',
        description:
          'A session acts in one workspace at a time. Switching rotates the token: the one sent with this request stops working; use the one in the body (the cookie is replaced).',
        errorResponses: { 401: 'Authentication required', 403: 'Access denied to workspace' },
      },
    })
    .input(SwitchWorkspaceInput)
    .output(SignedInSchema)
    .mutation(async ({ ctx, input }) =>
      withCookie(ctx, () => service(ctx).switchWorkspace(ctx.session, input.workspaceId)),
    ),

  listSessions: signedInProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/auth/sessions',
        tags,
        protect: true,
        summary: 'Your live sessions',
        errorResponses: { 401: 'Authentication required' },
      },
    })
    .input(z.void())
    .output(z.object({ sessions: z.array(SessionListItemSchema) }))
    .query(async ({ ctx }) => ({ sessions: await service(ctx).listSessions(ctx.session) })),

  revokeSession: signedInProcedure
    .meta({
      openapi: {
        method: 'DELETE',
        path: '/auth/sessions/{sessionId}',
        tags,
        protect: true,
        summary: 'Revoke one of your sessions',
        errorResponses: { 401: 'Authentication required', 404: 'Session not found' },
      },
    })
    .input(z.object({ sessionId: z.string() }))
    .output(z.object({ revoked: z.literal(true), sessionId: z.string() }))
    .mutation(async ({ ctx, input }) => {
      const { current } = await service(ctx).revokeOwnSession(ctx.session, input.sessionId);
      if (current) clearSessionCookie(ctx.req, ctx.res, ctx.deps);
      return { revoked: true as const, sessionId: input.sessionId };
    }),
});
