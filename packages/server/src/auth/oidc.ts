import * as client from 'openid-client';
import { AppError, appError } from '../errors/index.js';
import { openSecret, sealSecret } from './secret-box.js';
import type { OidcSettings } from './settings.js';

/**
 * Sign-in through an OpenID Connect provider (docs/identity.md, decision 0026): the
 * authorization-code flow with PKCE (S256), `state` and `nonce`, with openid-client doing the
 * protocol (discovery, the token request, the ID token's issuer, audience, expiry, nonce and,
 * through `enableNonRepudiationChecks`, its signature against the provider's JWKS).
 *
 * What the callback needs to finish the flow (state, nonce, PKCE verifier, where to go after,
 * the redirect URI used) travels in a short-lived HTTP-only cookie sealed with AES-256-GCM
 * under the signing secret: nothing is stored server-side, and the callback only succeeds in
 * the browser that started the flow (login CSRF: a callback URL sent to someone else lacks
 * their cookie).
 */

export const OIDC_STATE_COOKIE = 'aisuite_oidc';
/** How long a started sign-in may take at the provider. */
export const OIDC_STATE_TTL_SECONDS = 600;
const SEAL_PURPOSE = 'oidc-state';
/** A discovered configuration is used this long before the document is read again. */
const DISCOVERY_TTL_MS = 3600_000;
/** Seconds before a request to the provider is abandoned. */
const PROVIDER_TIMEOUT_SECONDS = 10;
const RETURN_TO_MAX = 2048;

/** A sign-in between `/auth/oidc/start` and the callback. */
export interface PendingOidcSignIn {
  state: string;
  nonce: string;
  codeVerifier: string;
  returnTo: string;
  redirectUri: string;
  /** Epoch milliseconds after which the callback refuses it. */
  expiresAt: number;
}

/** The identity the provider vouched for, from the verified ID token. */
export interface OidcIdentity {
  issuer: string;
  subject: string;
  email: string | undefined;
  emailVerified: boolean;
  name: string | undefined;
}

export const INVALID_RETURN_TO = () => appError('INVALID_RETURN_TO');
export const OIDC_STATE_INVALID = () => appError('OIDC_STATE_INVALID');
export const OIDC_NOT_CONFIGURED = () => appError('OIDC_NOT_CONFIGURED');
const PROVIDER_UNAVAILABLE = (reason: string) =>
  appError('OIDC_PROVIDER_UNAVAILABLE', { details: { reason } });

/**
 * Where to send the browser after sign-in: only a path on this site. Refused: absolute URLs,
 * scheme-relative `//host`, `/\host` (browsers read `\` as `/`), control characters (browsers
 * drop tabs and newlines, so `/\t/host` would become `//host`). Normalised through the URL
 * parser, so what is returned is exactly what the `Location` header carries. Default `/`.
 */
export function safeReturnTo(value: unknown): string {
  if (value === undefined || value === '') return '/';
  if (typeof value !== 'string' || value.length > RETURN_TO_MAX) throw INVALID_RETURN_TO();
  if (!value.startsWith('/') || value.startsWith('//') || /[\\\u0000-\u001f\u007f]/.test(value)) {
    throw INVALID_RETURN_TO();
  }
  const base = 'http://return-to.invalid';
  let url: URL;
  try {
    url = new URL(value, base);
  } catch {
    throw INVALID_RETURN_TO();
  }
  if (url.origin !== base) throw INVALID_RETURN_TO();
  const out = `${url.pathname}${url.search}${url.hash}`;
  if (!out.startsWith('/') || out.startsWith('//')) throw INVALID_RETURN_TO();
  return out;
}

export function sealPendingSignIn(signingSecret: string, pending: PendingOidcSignIn): string {
  return sealSecret(signingSecret, SEAL_PURPOSE, JSON.stringify(pending));
}

/** The pending sign-in a cookie carries, or undefined when absent, forged or expired. */
export function openPendingSignIn(
  signingSecret: string,
  sealed: string | undefined,
): PendingOidcSignIn | undefined {
  if (!sealed) return undefined;
  const text = openSecret(signingSecret, SEAL_PURPOSE, sealed);
  if (!text) return undefined;
  try {
    const p = JSON.parse(text) as PendingOidcSignIn;
    if (typeof p.state !== 'string' || typeof p.expiresAt !== 'number' || p.expiresAt < Date.now()) {
      return undefined;
    }
    return p;
  } catch {
    return undefined;
  }
}

/** What went wrong talking to the provider: the message, and the HTTP status of an answer. */
function describeFailure(err: unknown): string {
  const e = err as Error & { cause?: unknown };
  let status: number | undefined;
  for (let c: unknown = e, depth = 0; c && depth < 4; depth++) {
    const st = (c as { status?: unknown }).status;
    if (typeof st === 'number') status = st;
    c = (c as { cause?: unknown }).cause;
  }
  const inner = e.cause instanceof Error && e.cause.message !== e.message ? `: ${e.cause.message}` : '';
  return `${e.message}${inner}${status ? ` (HTTP ${status})` : ''}`;
}

/** Errors of the exchange and of the ID token's checks, as the callback answers them. */
function callbackError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  if (err instanceof client.AuthorizationResponseError) {
    return appError('OIDC_PROVIDER_REFUSED', {
      details: {
        error: err.error,
        ...(err.error_description ? { description: err.error_description } : {}),
      },
    });
  }
  if (err instanceof client.ResponseBodyError) {
    return appError('OIDC_PROVIDER_REFUSED', {
      details: {
        error: err.error,
        ...(err.error_description ? { description: err.error_description } : {}),
      },
    });
  }
  const e = err as Error & { code?: string; cause?: unknown };
  // fetch's network failures, openid-client's timeouts, and answers that are not the protocol's
  // at all (a 5xx page): the provider is down, its answer was not wrong.
  if (
    e.name === 'TypeError' ||
    e.name === 'TimeoutError' ||
    e.name === 'AbortError' ||
    e.code === 'OAUTH_RESPONSE_IS_NOT_CONFORM' ||
    e.code === 'OAUTH_RESPONSE_IS_NOT_JSON'
  ) {
    return PROVIDER_UNAVAILABLE(describeFailure(e));
  }
  // openid-client wraps oauth4webapi's error (the precise message, and the claim at fault)
  // in a generic one: report the inner one, never the claims themselves.
  const inner = e.cause instanceof Error ? (e.cause as Error & { code?: string; cause?: unknown }) : e;
  const claim = (inner.cause as { claim?: unknown } | undefined)?.claim;
  return appError('OIDC_TOKEN_INVALID', {
    details: {
      reason: inner.message,
      ...((inner.code ?? e.code) ? { check: inner.code ?? e.code } : {}),
      ...(typeof claim === 'string' ? { claim } : {}),
    },
  });
}

/**
 * The relying party: the provider's configuration, discovered on first use and cached for an
 * hour (a failed discovery is not cached, so the next sign-in tries again).
 */
export class OidcClient {
  private discovered: { at: number; config: Promise<client.Configuration> } | undefined;

  constructor(readonly settings: OidcSettings) {}

  private configuration(): Promise<client.Configuration> {
    const now = Date.now();
    if (this.discovered && now - this.discovered.at < DISCOVERY_TTL_MS) return this.discovered.config;
    const s = this.settings;
    const config = client
      .discovery(
        new URL(s.issuer),
        s.clientId,
        undefined,
        s.clientSecret ? client.ClientSecretBasic(s.clientSecret) : client.None(),
        {
          timeout: PROVIDER_TIMEOUT_SECONDS,
          ...(s.allowHttp ? { execute: [client.allowInsecureRequests] } : {}),
        },
      )
      .then((c) => {
        // Verify the ID token's signature with the provider's JWKS (openid-client would
        // otherwise rely on TLS to the token endpoint alone).
        client.enableNonRepudiationChecks(c);
        return c;
      });
    const entry = { at: now, config };
    this.discovered = entry;
    config.catch(() => {
      if (this.discovered === entry) this.discovered = undefined;
    });
    return config;
  }

  private async configured(): Promise<client.Configuration> {
    try {
      return await this.configuration();
    } catch (err) {
      throw PROVIDER_UNAVAILABLE(describeFailure(err));
    }
  }

  /** Starts a sign-in: the provider's authorization URL and what the callback will need. */
  async start(input: {
    returnTo: string;
    redirectUri: string;
    loginHint?: string;
  }): Promise<{ url: URL; pending: PendingOidcSignIn }> {
    const config = await this.configured();
    const pending: PendingOidcSignIn = {
      state: client.randomState(),
      nonce: client.randomNonce(),
      codeVerifier: client.randomPKCECodeVerifier(),
      returnTo: input.returnTo,
      redirectUri: input.redirectUri,
      expiresAt: Date.now() + OIDC_STATE_TTL_SECONDS * 1000,
    };
    const params: Record<string, string> = {
      redirect_uri: pending.redirectUri,
      scope: this.settings.scopes,
      state: pending.state,
      nonce: pending.nonce,
      code_challenge: await client.calculatePKCECodeChallenge(pending.codeVerifier),
      code_challenge_method: 'S256',
    };
    if (input.loginHint) params.login_hint = input.loginHint;
    return { url: client.buildAuthorizationUrl(config, params), pending };
  }

  /**
   * Finishes a sign-in from the callback's query: the state must be the pending one's (checked
   * here first, then again by openid-client), the code is exchanged with the PKCE verifier, and
   * the ID token's signature, issuer, audience, expiry and nonce are verified.
   */
  async finish(pending: PendingOidcSignIn, query: URLSearchParams): Promise<OidcIdentity> {
    if (query.get('state') !== pending.state) throw OIDC_STATE_INVALID();
    const config = await this.configured();
    // The URL the provider redirected to, as registered (not as this request's Host says).
    const current = new URL(pending.redirectUri);
    current.search = query.toString();
    let claims: client.IDToken | undefined;
    let accessToken: string | undefined;
    try {
      const tokens = await client.authorizationCodeGrant(config, current, {
        pkceCodeVerifier: pending.codeVerifier,
        expectedState: pending.state,
        expectedNonce: pending.nonce,
        idTokenExpected: true,
      });
      claims = tokens.claims();
      accessToken = tokens.access_token;
    } catch (err) {
      throw callbackError(err);
    }
    if (!claims) throw callbackError(new Error('the token response has no ID token'));
    let email = text(claims.email);
    let verified = claims.email_verified;
    let name = text(claims.name);
    // A "thin" ID token (sub only, or an email without email_verified): the UserInfo endpoint
    // completes it, answering for the same subject (openid-client checks `sub`). The ID
    // token's email wins; UserInfo's email_verified counts only for that same address.
    if (
      (email === undefined || verified === undefined) &&
      accessToken &&
      config.serverMetadata().userinfo_endpoint
    ) {
      let info: client.UserInfoResponse;
      try {
        info = await client.fetchUserInfo(config, accessToken, claims.sub);
      } catch (err) {
        throw callbackError(err);
      }
      const infoEmail = text(info.email);
      if (email === undefined) {
        email = infoEmail;
        verified = info.email_verified;
      } else if (infoEmail?.toLowerCase() === email.toLowerCase()) {
        verified = info.email_verified;
      }
      name ??= text(info.name);
    }
    return {
      issuer: claims.iss,
      subject: claims.sub,
      email,
      emailVerified: verified === true || verified === 'true',
      name,
    };
  }
}

/** A claim that is a non-blank string, trimmed; anything else is absent. */
function text(v: unknown): string | undefined {
  return typeof v === 'string' && v.trim() ? v.trim() : undefined;
}

const clients = new WeakMap<OidcSettings, OidcClient>();

/** The one client of a server's OIDC settings (its discovery cache lives as long as the server). */
export function oidcClient(settings: OidcSettings | undefined): OidcClient {
  if (!settings) throw OIDC_NOT_CONFIGURED();
  let c = clients.get(settings);
  if (!c) {
    c = new OidcClient(settings);
    clients.set(settings, c);
  }
  return c;
}
