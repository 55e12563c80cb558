import { ConfigError } from '../config.js';
import { normalizeOrigin } from './widget-tokens.js';

/** How sign-in, sessions, invitations and OIDC behave; read once at start (docs/identity.md). */
export interface IdentitySettings {
  /** `AUTH_SIGNUP_ENABLED`: anyone may create an account (and a workspace of their own). */
  signupEnabled: boolean;
  /** A session unused this long expires. */
  sessionIdleSeconds: number;
  /** A session expires this long after sign-in, used or not. */
  sessionMaxAgeSeconds: number;
  /** Origins (besides `PUBLIC_BASE_URL`'s) a cookie-authenticated state-changing request may come from. */
  trustedOrigins: string[];
  signIn: {
    /** Failed attempts per account (email) per window before 429. */
    maxFailuresPerAccount: number;
    /** Failed attempts per client address per window before 429. */
    maxFailuresPerAddress: number;
    windowSeconds: number;
  };
  invitationTtlSeconds: number;
  /** Page of the web console that accepts an invitation; the token goes in its fragment. */
  invitationUrl: string | undefined;
  /** Invitation mail (optional): an SMTP URL for nodemailer and the From address. */
  mail: { smtpUrl: string; from: string } | undefined;
  oidc: OidcSettings | undefined;
}

export interface OidcSettings {
  issuer: string;
  clientId: string;
  clientSecret: string | undefined;
  /** Lower-case email domains allowed to sign in through OIDC; empty = any. */
  allowedDomains: string[];
  scopes: string;
  /** The callback URL registered with the provider; derived from the public origin when unset. */
  redirectUri: string | undefined;
  /** What the sign-in button says ("Sign in with <name>"): `OIDC_PROVIDER_NAME`, else the issuer's host. */
  providerName: string;
  /**
   * Plain-http requests to the provider (openid-client refuses them otherwise): `OIDC_ALLOW_HTTP`,
   * default on only for an issuer on a loopback host (a provider on this machine, tests).
   */
  allowHttp: boolean;
}

/** localhost, 127.0.0.0/8 and ::1: a provider on this machine. */
export function isLoopbackHost(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/^\[|\]$/g, '');
  return h === 'localhost' || h.endsWith('.localhost') || h === '::1' || /^127(\.\d{1,3}){3}$/.test(h);
}

const DAY = 86_400;

function int(env: Record<string, string | undefined>, name: string, fallback: number, min = 1): number {
  const v = env[name];
  if (v === undefined || v.trim() === '') return fallback;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min) throw new ConfigError(`${name} must be an integer >= ${min}`);
  return n;
}

function bool(env: Record<string, string | undefined>, name: string): boolean {
  const v = (env[name] ?? '').trim().toLowerCase();
  if (v === '' || v === 'false' || v === '0') return false;
  if (v === 'true' || v === '1') return true;
  throw new ConfigError(`${name} must be true or false`);
}

const list = (v: string | undefined) =>
  (v ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

function url(env: Record<string, string | undefined>, name: string): string | undefined {
  const v = env[name]?.trim();
  if (!v) return undefined;
  try {
    const u = new URL(v);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('scheme');
  } catch {
    throw new ConfigError(`${name} must be an http(s) URL`);
  }
  return v;
}

function mailSettings(env: Record<string, string | undefined>): IdentitySettings['mail'] {
  const smtpUrl = env.SMTP_URL?.trim();
  if (!smtpUrl) return undefined;
  try {
    const u = new URL(smtpUrl);
    if (u.protocol !== 'smtp:' && u.protocol !== 'smtps:') throw new Error('scheme');
  } catch {
    throw new ConfigError('SMTP_URL must be smtp://[user:pass@]host[:port] or smtps://…');
  }
  const from = env.MAIL_FROM?.trim();
  if (!from) throw new ConfigError('MAIL_FROM is required when SMTP_URL is set');
  return { smtpUrl, from };
}

function oidcSettings(env: Record<string, string | undefined>): OidcSettings | undefined {
  const issuer = env.OIDC_ISSUER?.trim();
  if (!issuer) return undefined;
  const clientId = env.OIDC_CLIENT_ID?.trim();
  if (!clientId) throw new ConfigError('OIDC_CLIENT_ID is required when OIDC_ISSUER is set');
  let issuerUrl: URL;
  try {
    issuerUrl = new URL(issuer);
    if (issuerUrl.protocol !== 'http:' && issuerUrl.protocol !== 'https:') throw new Error('scheme');
  } catch {
    throw new ConfigError('OIDC_ISSUER must be an http(s) URL');
  }
  const allowHttp = env.OIDC_ALLOW_HTTP?.trim()
    ? bool(env, 'OIDC_ALLOW_HTTP')
    : isLoopbackHost(issuerUrl.hostname);
  if (issuerUrl.protocol === 'http:' && !allowHttp) {
    throw new ConfigError(
      'OIDC_ISSUER must be https (plain http only for a provider on a loopback host, or with OIDC_ALLOW_HTTP=true)',
    );
  }
  const redirectUri = env.OIDC_REDIRECT_URI?.trim() || undefined;
  if (redirectUri) {
    try {
      new URL(redirectUri);
    } catch {
      throw new ConfigError('OIDC_REDIRECT_URI must be a URL');
    }
  }
  return {
    issuer,
    clientId,
    clientSecret: env.OIDC_CLIENT_SECRET?.trim() || undefined,
    allowedDomains: list(env.OIDC_ALLOWED_DOMAINS).map((d) => d.toLowerCase().replace(/^@/, '')),
    scopes: env.OIDC_SCOPES?.trim() || 'openid email profile',
    redirectUri,
    providerName: env.OIDC_PROVIDER_NAME?.trim() || issuerUrl.hostname,
    allowHttp,
  };
}

export function identitySettingsFromEnv(env: Record<string, string | undefined>): IdentitySettings {
  const trustedOrigins = list(env.AUTH_TRUSTED_ORIGINS).map((o) => {
    const origin = normalizeOrigin(o);
    if (!origin)
      throw new ConfigError(`AUTH_TRUSTED_ORIGINS: "${o}" is not an origin (scheme://host[:port])`);
    return origin;
  });
  const sessionMaxAgeSeconds = int(env, 'AUTH_SESSION_MAX_AGE_SECONDS', 30 * DAY, 60);
  return {
    signupEnabled: bool(env, 'AUTH_SIGNUP_ENABLED'),
    sessionIdleSeconds: Math.min(
      sessionMaxAgeSeconds,
      int(env, 'AUTH_SESSION_IDLE_TIMEOUT_SECONDS', 7 * DAY, 60),
    ),
    sessionMaxAgeSeconds,
    trustedOrigins,
    signIn: {
      maxFailuresPerAccount: int(env, 'AUTH_SIGNIN_MAX_FAILURES_PER_ACCOUNT', 10),
      maxFailuresPerAddress: int(env, 'AUTH_SIGNIN_MAX_FAILURES_PER_ADDRESS', 100),
      windowSeconds: int(env, 'AUTH_SIGNIN_WINDOW_SECONDS', 900),
    },
    invitationTtlSeconds: int(env, 'AUTH_INVITATION_TTL_SECONDS', 7 * DAY, 60),
    invitationUrl: url(env, 'AUTH_INVITATION_URL'),
    mail: mailSettings(env),
    oidc: oidcSettings(env),
  };
}
