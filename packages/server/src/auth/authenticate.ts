import type { EntityManager } from '@mikro-orm/postgresql';
import { parse as parseCookies } from 'cookie';
import type { Request } from 'express';
import type { ServerDeps } from '../context.js';
import { appError } from '../errors/index.js';
import { bearerToken, resolveApiKey } from './api-keys.js';
import type { Principal } from './principal.js';
import { isSessionToken, resolveSession, SESSION_COOKIE, type SessionRecord } from './sessions.js';
import { normalizeOrigin, resolveWidgetToken, WIDGET_TOKEN_PREFIX } from './widget-tokens.js';

/** The kinds of caller a route may accept (spec 5). */
export type PrincipalKind = 'apiKey' | 'session' | 'widget';

/**
 * What a route accepts, and the 401 message for anything else: a missing credential, a
 * credential of another kind, or an invalid one of an accepted kind.
 */
export interface AuthPolicy {
  kinds: readonly PrincipalKind[];
  refusal: 'INVALID_API_KEY' | 'AUTHENTICATION_REQUIRED';
}

/** Chat, Agents, Artifacts, Image, Insights (spec 5). */
export const API_KEY: AuthPolicy = { kinds: ['apiKey'], refusal: 'INVALID_API_KEY' };
/** Apps chat and memory: a key or a widget token. */
export const API_KEY_OR_WIDGET: AuthPolicy = { kinds: ['apiKey', 'widget'], refusal: 'INVALID_API_KEY' };
/** Storage: a key or a session. */
export const API_KEY_OR_SESSION: AuthPolicy = { kinds: ['apiKey', 'session'], refusal: 'INVALID_API_KEY' };
/** RAG, key management, tool-server connections, members: a person signed in. */
export const SESSION: AuthPolicy = { kinds: ['session'], refusal: 'AUTHENTICATION_REQUIRED' };

/**
 * Every authenticated route on the web console's mount of the API (`/console-api/v1`,
 * decision 0025): the signed-in person's session acting in its workspace, whatever the route
 * accepts on `/api/v1`. Keys and widget tokens are refused there.
 */
export const CONSOLE: AuthPolicy = SESSION;

const UNSAFE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

type SessionCredential = { token: string; via: 'bearer' | 'cookie' };

/** The session credential of a request: a bearer session token, else the session cookie. */
export function sessionCredential(req: Request): SessionCredential | undefined {
  const bearer = bearerToken(req.headers.authorization);
  if (bearer) return isSessionToken(bearer) ? { token: bearer, via: 'bearer' } : undefined;
  if (req.headers.authorization) return undefined;
  const cookie = req.headers.cookie ? parseCookies(req.headers.cookie)[SESSION_COOKIE] : undefined;
  return cookie ? { token: cookie, via: 'cookie' } : undefined;
}

/**
 * The origins a cookie-authenticated state-changing request may come from: `PUBLIC_BASE_URL`'s
 * and `AUTH_TRUSTED_ORIGINS`; with neither configured, the request's own origin.
 */
function allowedOrigins(req: Request, deps: ServerDeps): string[] {
  const configured = [...deps.identity.trustedOrigins];
  const base = deps.config.publicBaseUrl
    ? normalizeOrigin(new URL(deps.config.publicBaseUrl).origin)
    : undefined;
  if (base) configured.push(base);
  if (configured.length > 0) return configured;
  const own = normalizeOrigin(`${req.protocol}://${req.get('host') ?? ''}`);
  return own ? [own] : [];
}

/**
 * CSRF protection of cookie sessions: a browser sends the cookie along with requests other
 * sites make, so a state-changing request authenticated by the cookie must say, in `Origin`
 * (or `Referer` when a browser leaves `Origin` out), that it comes from a trusted origin.
 * Bearer tokens are never sent by a browser on its own, so they need no such check.
 */
export function assertSameOrigin(req: Request, deps: ServerDeps): void {
  if (!UNSAFE_METHODS.has(req.method)) return;
  const claimed = claimedOrigin(req);
  if (!claimed || !allowedOrigins(req, deps).includes(claimed)) {
    throw appError('CSRF_REJECTED');
  }
}

/**
 * Where a request says it comes from: `Origin`, or `Referer`'s origin when a browser leaves
 * `Origin` out; `''` for an origin that cannot be trusted (`null`, unparseable); undefined when
 * the request names none (a program, not a browser).
 */
function claimedOrigin(req: Request): string | undefined {
  const origin = req.headers.origin;
  if (origin) return origin === 'null' ? '' : (normalizeOrigin(origin) ?? '');
  if (!req.headers.referer) return undefined;
  try {
    return normalizeOrigin(new URL(req.headers.referer).origin) ?? '';
  } catch {
    return '';
  }
}

/**
 * Whether a request that opens a session (sign-in, sign-up, invitation accept, workspace
 * switch) may get it as the session cookie. A browser always says where a POST comes from:
 * from a trusted origin it gets the cookie; from any other it is refused with 403 before any
 * work (login CSRF: another site signing a visitor in to an account of its choosing). A
 * request naming no origin is a program: it gets the token in the body, no cookie.
 */
export function sessionCookieAllowed(req: Request, deps: ServerDeps): boolean {
  const claimed = claimedOrigin(req);
  if (claimed === undefined) return false;
  if (!claimed || !allowedOrigins(req, deps).includes(claimed)) {
    throw appError('CSRF_UNTRUSTED_ORIGIN', {
      details: { origin: req.headers.origin ?? req.headers.referer ?? null },
    });
  }
  return true;
}

/**
 * The session of a request (bearer token or cookie, CSRF-checked), without requiring a
 * workspace: what the `/auth/*` routes of a signed-in person need. 401 `Authentication required`
 * otherwise.
 */
export async function authenticateSession(
  req: Request,
  deps: ServerDeps,
  em: EntityManager,
): Promise<SessionRecord> {
  if (req.session) return req.session;
  const credential = sessionCredential(req);
  if (!credential) throw appError('AUTHENTICATION_REQUIRED');
  if (credential.via === 'cookie') assertSameOrigin(req, deps);
  const session = await resolveSession(em, credential.token, deps.identity);
  if (!session) throw appError('SESSION_INVALID');
  req.session = session;
  return session;
}

/** The principal of a session acting in its workspace; 403 when it has none. */
export function sessionPrincipal(session: SessionRecord): Principal {
  const ws = session.workspace;
  if (!ws) {
    throw appError('NO_ACTIVE_WORKSPACE');
  }
  return {
    via: 'session',
    workspaceId: ws.id,
    workspaceName: ws.name,
    userId: session.userId,
    role: ws.role,
    sessionId: session.sessionId,
  };
}

function kindOf(req: Request): PrincipalKind | undefined {
  const token = bearerToken(req.headers.authorization);
  if (token?.startsWith(WIDGET_TOKEN_PREFIX)) return 'widget';
  if (token && isSessionToken(token)) return 'session';
  if (token) return 'apiKey';
  if (!req.headers.authorization && sessionCredential(req)) return 'session';
  return undefined;
}

/**
 * THE authentication of every route: resolves the request's credential once (cached on the
 * request) into a principal, if its kind is one the route accepts. Which kind a credential is
 * follows from its prefix (`svc_ai_` key, `svc_wt_` widget token, `svc_ss_` session token) or
 * from the session cookie when no `Authorization` header is sent.
 */
export async function authenticate(
  req: Request,
  deps: ServerDeps,
  em: EntityManager,
  routePolicy: AuthPolicy,
): Promise<Principal> {
  const policy = req.consoleApi ? CONSOLE : routePolicy;
  const cached = req.principal;
  if (cached) {
    if (policy.kinds.includes(cached.via)) return cached;
    throw appError(policy.refusal);
  }
  const kind = kindOf(req);
  if (!kind || !policy.kinds.includes(kind)) throw appError(policy.refusal);
  let principal: Principal;
  if (kind === 'apiKey') {
    const resolved = await resolveApiKey(em, bearerToken(req.headers.authorization));
    if (!resolved) throw appError('INVALID_API_KEY');
    principal = resolved;
  } else if (kind === 'widget') {
    principal = await resolveWidgetToken(
      em,
      bearerToken(req.headers.authorization) ?? '',
      req.headers.origin,
    );
  } else {
    principal = sessionPrincipal(await authenticateSession(req, deps, em));
  }
  req.principal = principal;
  return principal;
}

/** Owners and admins only: 403 with the operation's message for members. */
export function requireManager(
  principal: Principal,
  refusal: 'KEY_MANAGEMENT_FORBIDDEN' | 'TOOL_SERVERS_FORBIDDEN',
): void {
  if (principal.role !== 'owner' && principal.role !== 'admin') throw appError(refusal);
}
