import { parse as parseCookies } from 'cookie';
import type { Request, Response, Router } from 'express';
import { z } from 'zod';
import { sessionCredential } from '../../auth/authenticate.js';
import { setOidcStateCookie, setSessionCookie } from '../../auth/cookies.js';
import {
  OIDC_NOT_CONFIGURED,
  OIDC_STATE_COOKIE,
  OIDC_STATE_INVALID,
  OIDC_STATE_TTL_SECONDS,
  oidcClient,
  openPendingSignIn,
  safeReturnTo,
  sealPendingSignIn,
} from '../../auth/oidc.js';
import type { ServerDeps } from '../../context.js';
import { appError } from '../../errors/index.js';
import { acceptsHtml } from '../../http/console.js';
import { sendError, toAppError } from '../../http/errors.js';
import type { RawRouteModule } from '../../http/raw-routes.js';
import { OidcSignInService } from './oidc-service.js';
import { IdentityService } from './service.js';

export const OIDC_START_PATH = '/auth/oidc/start';
export const OIDC_CALLBACK_PATH = '/auth/oidc/callback';
/** The console page that explains a failed sign-in through the provider (packages/console). */
export const SIGN_IN_PROBLEM_PAGE = '/sign-in/problem';

/** The callback URL given to the provider: `OIDC_REDIRECT_URI`, else on `PUBLIC_BASE_URL`'s origin or this request's. */
function redirectUri(deps: ServerDeps, req: Request): string {
  const configured = deps.identity.oidc?.redirectUri;
  if (configured) return configured;
  const origin = deps.config.publicBaseUrl
    ? new URL(deps.config.publicBaseUrl).origin
    : `${req.protocol}://${req.get('host') ?? 'localhost'}`;
  return `${origin}/api/v1${OIDC_CALLBACK_PATH}`;
}

function redirect(res: Response, location: string, status = 302) {
  res.status(status);
  res.setHeader('Location', location);
  res.setHeader('Cache-Control', 'no-store');
  res.end();
}

/** `GET /auth/oidc/start`: 302 to the provider's authorization endpoint. */
async function start(deps: ServerDeps, req: Request, res: Response) {
  const settings = deps.identity.oidc;
  if (!settings) throw OIDC_NOT_CONFIGURED();
  const returnTo = safeReturnTo(req.query.returnTo);
  const hint = req.query.loginHint;
  if (hint !== undefined && (typeof hint !== 'string' || hint.length > 320)) {
    throw appError('INVALID_LOGIN_HINT');
  }
  const { url, pending } = await oidcClient(settings).start({
    returnTo,
    redirectUri: redirectUri(deps, req),
    loginHint: hint || undefined,
  });
  const sealed = sealPendingSignIn(deps.config.signingSecret as string, pending);
  setOidcStateCookie(req, res, deps, OIDC_STATE_COOKIE, sealed, OIDC_STATE_TTL_SECONDS);
  redirect(res, url.href);
}

/**
 * `GET /auth/oidc/callback`: where the provider sends the browser back. Finishes the flow with
 * the pending sign-in of this browser's cookie (cleared whatever happens), links or creates the
 * user, opens a session as password sign-in does (a session the request carried is revoked),
 * sets its cookie and sends the browser to `returnTo`.
 */
async function callback(deps: ServerDeps, req: Request, res: Response) {
  const settings = deps.identity.oidc;
  if (!settings) throw OIDC_NOT_CONFIGURED();
  const cookies = req.headers.cookie ? parseCookies(req.headers.cookie) : {};
  const pending = openPendingSignIn(deps.config.signingSecret as string, cookies[OIDC_STATE_COOKIE]);
  setOidcStateCookie(req, res, deps, OIDC_STATE_COOKIE, undefined, 0);
  if (!pending) throw OIDC_STATE_INVALID();
  const query = new URLSearchParams(req.originalUrl.split('?')[1] ?? '');
  const identity = await oidcClient(settings).finish(pending, query);
  const em = deps.em();
  const result = await new OidcSignInService(em, deps.identity).resolve(identity);
  const signedIn = await new IdentityService(em, deps.identity).openSession(
    result.userId,
    'oidc',
    {
      ip: req.ip ?? null,
      userAgent: req.headers['user-agent'] ?? null,
      previousToken: sessionCredential(req)?.token,
    },
    result.workspaceId,
  );
  setSessionCookie(req, res, deps, signedIn.token, new Date(signedIn.session.expiresAt));
  deps.log.info(
    { userId: result.userId, outcome: result.outcome, sessionId: signedIn.session.id },
    'signed in through OIDC',
  );
  redirect(res, pending.returnTo);
}

const handle =
  (deps: ServerDeps, fn: (deps: ServerDeps, req: Request, res: Response) => Promise<void>) =>
  (req: Request, res: Response) => {
    fn(deps, req, res).catch((err: unknown) => {
      const appErr = toAppError(err);
      if (appErr.status >= 500 && !appErr.code)
        deps.log.error({ err, path: req.path }, 'OIDC request failed');
      else deps.log.warn({ code: appErr.code, details: appErr.details, path: req.path }, appErr.message);
      res.setHeader('Cache-Control', 'no-store');
      // A person's browser reached this through the provider's redirect: raw JSON would be a dead
      // end, so it lands on the console page that says what happened and the way back. API
      // clients (no text/html in Accept) keep the JSON answer.
      if (acceptsHtml(req.get('accept'))) {
        res.vary('Accept');
        const code = appErr.code ?? (appErr.status >= 500 ? 'OIDC_FAILED' : 'OIDC_REFUSED');
        redirect(res, `${SIGN_IN_PROBLEM_PAGE}?${new URLSearchParams({ code })}`, 303);
        return;
      }
      sendError(res, appErr);
    });
  };

const redirectResponse = (description: string) => ({
  description,
  headers: { Location: { schema: { type: 'string' as const } } },
});

export const oidcRoutes: RawRouteModule = {
  name: 'oidc',
  mount(router: Router, deps: ServerDeps) {
    router.get(OIDC_START_PATH, handle(deps, start));
    router.get(OIDC_CALLBACK_PATH, handle(deps, callback));
  },
  openapi: {
    [OIDC_START_PATH]: {
      get: {
        operationId: 'auth-oidc-start',
        tags: ['Auth'],
        summary: 'Sign in with the identity provider (OIDC): redirects the browser there',
        description:
          'Browsers navigate here (it is not an API call). Answers 302 to the provider’s authorization endpoint (authorization-code flow with PKCE S256, `state` and `nonce`) and sets a short-lived HTTP-only cookie with what the callback needs. `returnTo` is where the browser lands after signing in: a path on this site only (400 `INVALID_RETURN_TO` for anything else, such as `https://…` or `//host`); default `/`. 404 `OIDC_NOT_CONFIGURED` without `OIDC_ISSUER`; 502 when the provider’s discovery document cannot be read. A request whose `Accept` names `text/html` (a browser navigation) gets each of these errors as 303 to the console page `/sign-in/problem?code=<code>` instead of the JSON body.',
        security: [],
        requestParams: {
          query: z.object({
            returnTo: z.string().optional().describe('A path on this site, e.g. `/workspaces`'),
            loginHint: z.string().optional().describe('Passed to the provider as `login_hint`'),
          }),
        },
        responses: {
          302: redirectResponse('To the provider’s authorization endpoint'),
          303: redirectResponse(
            'A failure, for a browser (`Accept: text/html`): to `/sign-in/problem?code=<code>`',
          ),
          400: { description: '`INVALID_RETURN_TO`' },
          404: { description: '`OIDC_NOT_CONFIGURED`' },
          502: { description: '`OIDC_PROVIDER_UNAVAILABLE`' },
        },
      },
    },
    [OIDC_CALLBACK_PATH]: {
      get: {
        operationId: 'auth-oidc-callback',
        tags: ['Auth'],
        summary: 'Where the identity provider sends the browser back (OIDC redirect URI)',
        description:
          'Register `<PUBLIC_BASE_URL>/api/v1/auth/oidc/callback` (or `OIDC_REDIRECT_URI`) with the provider. Checks the `state` against the browser’s pending sign-in, exchanges the code with the PKCE verifier, verifies the ID token (signature against the provider’s JWKS, issuer, audience, expiry, nonce), then signs the person in: a linked identity, else the account with the provider-verified email (linked), else a new account when the email has pending invitations or sign-up is enabled. Answers 302 to `returnTo` with the session cookie set. Errors: 400 `OIDC_STATE_INVALID`; 401 `OIDC_PROVIDER_REFUSED`, `OIDC_TOKEN_INVALID`, `OIDC_EMAIL_MISSING`; 403 `OIDC_EMAIL_UNVERIFIED`, `OIDC_DOMAIN_NOT_ALLOWED`, `SIGNUP_DISABLED`; 409 `OIDC_IDENTITY_CONFLICT`; 502 `OIDC_PROVIDER_UNAVAILABLE`. A request whose `Accept` names `text/html` (the browser coming back from the provider) gets each of these errors as 303 to the console page `/sign-in/problem?code=<code>`, which says what happened and offers password sign-in or asking for an invitation; other clients get the JSON body.',
        security: [],
        requestParams: {
          query: z.object({
            code: z.string().optional(),
            state: z.string().optional(),
            iss: z.string().optional(),
            error: z.string().optional(),
            error_description: z.string().optional(),
          }),
        },
        responses: {
          302: redirectResponse('Signed in: to `returnTo`, with the `aisuite_session` cookie set'),
          303: redirectResponse(
            'A failure, for a browser (`Accept: text/html`): to `/sign-in/problem?code=<code>`',
          ),
          400: { description: '`OIDC_STATE_INVALID`' },
          401: { description: '`OIDC_PROVIDER_REFUSED`, `OIDC_TOKEN_INVALID`, `OIDC_EMAIL_MISSING`' },
          403: { description: '`OIDC_EMAIL_UNVERIFIED`, `OIDC_DOMAIN_NOT_ALLOWED`, `SIGNUP_DISABLED`' },
          404: { description: '`OIDC_NOT_CONFIGURED`' },
          409: { description: '`OIDC_IDENTITY_CONFLICT`' },
          502: { description: '`OIDC_PROVIDER_UNAVAILABLE`' },
        },
      },
    },
  },
};
