import { serialize } from 'cookie';
import type { Request, Response } from 'express';
import type { ServerDeps } from '../context.js';
import { SESSION_COOKIE } from './sessions.js';

/** `Secure` when the request came over https (behind a proxy: `TRUST_PROXY`) or the public origin is https. */
const secure = (req: Request, deps: ServerDeps) =>
  req.secure || (deps.config.publicBaseUrl?.startsWith('https:') ?? false);

/**
 * The browser's copy of a session: HTTP-only (page scripts cannot read it), `SameSite=Lax`
 * (not sent on cross-site sub-requests), lasting as long as the session's absolute lifetime.
 */
export function setSessionCookie(
  req: Request,
  res: Response,
  deps: ServerDeps,
  token: string,
  expiresAt: Date,
) {
  res.append(
    'Set-Cookie',
    serialize(SESSION_COOKIE, token, {
      httpOnly: true,
      sameSite: 'lax',
      secure: secure(req, deps),
      path: '/',
      expires: expiresAt,
    }),
  );
}

export function clearSessionCookie(req: Request, res: Response, deps: ServerDeps) {
  res.append(
    'Set-Cookie',
    serialize(SESSION_COOKIE, '', {
      httpOnly: true,
      sameSite: 'lax',
      secure: secure(req, deps),
      path: '/',
      expires: new Date(0),
    }),
  );
}

/**
 * The pending OIDC sign-in (sealed; `auth/oidc.ts`): HTTP-only, `SameSite=Lax` (sent with the
 * provider's top-level redirect back to the callback, not with cross-site sub-requests),
 * lasting as long as a sign-in may take at the provider. `undefined` clears it.
 */
export function setOidcStateCookie(
  req: Request,
  res: Response,
  deps: ServerDeps,
  name: string,
  value: string | undefined,
  maxAgeSeconds: number,
) {
  res.append(
    'Set-Cookie',
    serialize(name, value ?? '', {
      httpOnly: true,
      sameSite: 'lax',
      secure: secure(req, deps),
      path: '/',
      ...(value === undefined ? { expires: new Date(0) } : { maxAge: maxAgeSeconds }),
    }),
  );
}
