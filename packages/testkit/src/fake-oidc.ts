import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import { exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';
import { listen } from './listen.js';

/** A person the fake provider signs in. */
export interface FakeOidcUser {
  sub: string;
  email?: string;
  /** Defaults to true when `email` is set. */
  email_verified?: boolean;
  name?: string;
}

/**
 * Ways to make the provider misbehave, applied to every token issued until changed. Each one
 * breaks one check a relying party must make on the ID token or the exchange.
 */
export interface FakeOidcMisbehaviour {
  /** `wrong`: a nonce other than the one the client sent; `missing`: none at all. */
  nonce?: 'wrong' | 'missing';
  /** An `iss` claim other than the issuer of the discovery document. */
  wrongIssuer?: boolean;
  /** An `aud` claim naming another client. */
  wrongAudience?: boolean;
  /** Signed with a key that is not in the JWKS (same `kid`, so only the signature tells). */
  foreignKey?: boolean;
  /** `exp` an hour ago (and `iat` two hours ago). */
  expired?: boolean;
  /** Overrides the user's `email_verified` claim. */
  emailVerified?: boolean;
  /** The authorization endpoint answers `error=access_denied` instead of a code. */
  denyAuthorization?: boolean;
  /** The `state` the authorization endpoint sends back is not the client's. */
  wrongState?: boolean;
  /** The discovery document answers 503 (the provider is down). */
  discoveryDown?: boolean;
  /** The token endpoint answers 503 with an HTML page (the provider is down mid-flow). */
  tokenEndpointDown?: boolean;
  /**
   * A "thin" ID token: `sub` and the protocol claims only; email, email_verified and name are
   * served by the UserInfo endpoint alone (as some providers do for the code flow).
   */
  thinIdToken?: boolean;
  /** UserInfo answers for another subject than the ID token's (a token substitution). */
  userInfoWrongSubject?: boolean;
  /** UserInfo answers 503 (the provider is down after the token exchange). */
  userInfoDown?: boolean;
}

export interface FakeOidcOptions {
  clientId?: string;
  /** Required at the token endpoint (client_secret_basic or client_secret_post); none = public client. */
  clientSecret?: string;
  users?: FakeOidcUser[];
}

export interface FakeOidcAuthorizeRequest {
  params: URLSearchParams;
}

export interface FakeOidc {
  /** The issuer, e.g. `http://127.0.0.1:41234` (its discovery document is under `/.well-known/`). */
  issuer: string;
  clientId: string;
  clientSecret: string | undefined;
  /** Adds or replaces a user (matched by `sub`). */
  addUser(user: FakeOidcUser): void;
  /** The user `/authorize` signs in when no `login_hint` names one (the first user by default). */
  setDefaultUser(sub: string): void;
  misbehave(m: FakeOidcMisbehaviour): void;
  /** Every authorization request the provider received, oldest first. */
  authorizeRequests: FakeOidcAuthorizeRequest[];
  /** Token requests, with whether each was answered with tokens. */
  tokenRequests: { params: URLSearchParams; ok: boolean; error?: string }[];
  /** How many UserInfo requests were answered with claims. */
  readonly userInfoRequests: number;
  close(): Promise<void>;
}

interface PendingCode {
  user: FakeOidcUser;
  clientId: string;
  redirectUri: string;
  codeChallenge: string;
  nonce: string | undefined;
  expiresAt: number;
  used: boolean;
}

const b64url = (b: Buffer) => b.toString('base64url');
const s256 = (v: string) => b64url(createHash('sha256').update(v).digest());

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function json(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers });
  res.end(JSON.stringify(body));
}

/**
 * An OpenID Connect provider over real HTTP, for tests: discovery document, authorization
 * endpoint (auto-approves the user `login_hint` names, by email or subject, else the default
 * user), token endpoint (authorization_code grant; checks the client secret, the redirect URI,
 * the single use of the code and the PKCE S256 `code_verifier`), JWKS, UserInfo, and RS256 ID
 * tokens signed with jose. `misbehave` breaks one check at a time (nonce, issuer, audience,
 * signature, expiry, email_verified, state, a refusal), so a relying party's refusals can be
 * tested against the real protocol rather than a stubbed client library.
 */
export async function startFakeOidc(opts: FakeOidcOptions = {}): Promise<FakeOidc> {
  const clientId = opts.clientId ?? 'aisuite-test-client';
  const clientSecret = opts.clientSecret;
  const kid = `k-${randomBytes(4).toString('hex')}`;
  const signing = await generateKeyPair('RS256', { extractable: true });
  const foreign = await generateKeyPair('RS256', { extractable: true });
  const publicJwk: JWK = { ...(await exportJWK(signing.publicKey)), kid, alg: 'RS256', use: 'sig' };
  const users = new Map<string, FakeOidcUser>();
  for (const u of opts.users ?? []) users.set(u.sub, u);
  let defaultSub: string | undefined = opts.users?.[0]?.sub;
  let mis: FakeOidcMisbehaviour = {};
  const codes = new Map<string, PendingCode>();
  const accessTokens = new Map<string, FakeOidcUser>();
  const authorizeRequests: FakeOidcAuthorizeRequest[] = [];
  const tokenRequests: FakeOidc['tokenRequests'] = [];
  let userInfoRequests = 0;
  let issuer = '';

  const claimsOf = (u: FakeOidcUser) => {
    const c: Record<string, unknown> = {};
    if (u.email !== undefined) {
      c.email = u.email;
      c.email_verified = mis.emailVerified ?? u.email_verified ?? true;
    }
    if (u.name !== undefined) c.name = u.name;
    return c;
  };

  async function idToken(code: PendingCode): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    const payload: Record<string, unknown> = mis.thinIdToken ? {} : { ...claimsOf(code.user) };
    if (mis.nonce === 'wrong') payload.nonce = `not-${code.nonce ?? 'a-nonce'}`;
    else if (mis.nonce !== 'missing' && code.nonce !== undefined) payload.nonce = code.nonce;
    const iat = mis.expired ? now - 7200 : now;
    return new SignJWT(payload)
      .setProtectedHeader({ alg: 'RS256', kid, typ: 'JWT' })
      .setIssuer(mis.wrongIssuer ? 'http://issuer.invalid' : issuer)
      .setAudience(mis.wrongAudience ? 'another-client' : code.clientId)
      .setSubject(code.user.sub)
      .setIssuedAt(iat)
      .setExpirationTime(iat + 300)
      .sign(mis.foreignKey ? foreign.privateKey : signing.privateKey);
  }

  function authorize(url: URL, res: http.ServerResponse) {
    const p = url.searchParams;
    authorizeRequests.push({ params: new URLSearchParams(p) });
    const redirectUri = p.get('redirect_uri');
    if (p.get('client_id') !== clientId || !redirectUri) {
      return json(res, 400, {
        error: 'invalid_request',
        error_description: 'unknown client or redirect_uri',
      });
    }
    const back = new URL(redirectUri);
    const state = p.get('state');
    if (state !== null) back.searchParams.set('state', mis.wrongState ? `x${state}` : state);
    back.searchParams.set('iss', issuer);
    const fail = (error: string, description: string) => {
      back.searchParams.set('error', error);
      back.searchParams.set('error_description', description);
      res.writeHead(302, { location: back.toString() });
      res.end();
    };
    if (p.get('response_type') !== 'code') return fail('unsupported_response_type', 'code only');
    const challenge = p.get('code_challenge');
    if (!challenge || p.get('code_challenge_method') !== 'S256') {
      return fail('invalid_request', 'PKCE with S256 is required');
    }
    if (!(p.get('scope') ?? '').split(' ').includes('openid'))
      return fail('invalid_scope', 'openid is required');
    if (mis.denyAuthorization) return fail('access_denied', 'The user refused');
    const hint = p.get('login_hint');
    const user = hint
      ? [...users.values()].find((u) => u.sub === hint || u.email?.toLowerCase() === hint.toLowerCase())
      : defaultSub !== undefined
        ? users.get(defaultSub)
        : undefined;
    if (!user) return fail('access_denied', 'No such user');
    const code = b64url(randomBytes(24));
    codes.set(code, {
      user,
      clientId,
      redirectUri,
      codeChallenge: challenge,
      nonce: p.get('nonce') ?? undefined,
      expiresAt: Date.now() + 60_000,
      used: false,
    });
    back.searchParams.set('code', code);
    res.writeHead(302, { location: back.toString() });
    res.end();
  }

  async function token(req: http.IncomingMessage, res: http.ServerResponse) {
    const params = new URLSearchParams(await readBody(req));
    if (mis.tokenEndpointDown) {
      tokenRequests.push({ params, ok: false, error: 'down' });
      res.writeHead(503, { 'content-type': 'text/html' });
      res.end('<h1>Service Unavailable</h1>');
      return;
    }
    const record = (ok: boolean, error?: string) => tokenRequests.push({ params, ok, error });
    const refuse = (status: number, error: string, description: string) => {
      record(false, error);
      json(res, status, { error, error_description: description });
    };
    // Client authentication: client_secret_basic, client_secret_post, or none for public clients.
    let id = params.get('client_id') ?? undefined;
    let secret = params.get('client_secret') ?? undefined;
    const basic = req.headers.authorization?.match(/^Basic (.+)$/i)?.[1];
    if (basic) {
      const [u, s] = Buffer.from(basic, 'base64').toString('utf8').split(':');
      id = decodeURIComponent(u ?? '');
      secret = decodeURIComponent(s ?? '');
    }
    if (id !== clientId) return refuse(401, 'invalid_client', 'unknown client');
    if (clientSecret !== undefined && (secret === undefined || !safeEqual(secret, clientSecret))) {
      return refuse(401, 'invalid_client', 'client authentication failed');
    }
    if (params.get('grant_type') !== 'authorization_code') {
      return refuse(400, 'unsupported_grant_type', 'authorization_code only');
    }
    const code = codes.get(params.get('code') ?? '');
    if (!code || code.used || code.expiresAt < Date.now()) {
      if (code) code.used = true;
      return refuse(400, 'invalid_grant', 'unknown, used or expired code');
    }
    code.used = true;
    if (params.get('redirect_uri') !== code.redirectUri) {
      return refuse(400, 'invalid_grant', 'redirect_uri does not match');
    }
    const verifier = params.get('code_verifier');
    if (!verifier || !safeEqual(s256(verifier), code.codeChallenge)) {
      return refuse(400, 'invalid_grant', 'PKCE verification failed');
    }
    const accessToken = b64url(randomBytes(24));
    accessTokens.set(accessToken, code.user);
    record(true);
    json(res, 200, {
      access_token: accessToken,
      token_type: 'Bearer',
      expires_in: 300,
      scope: 'openid email profile',
      id_token: await idToken(code),
    });
  }

  const server = await listen((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    const route = `${req.method} ${url.pathname}`;
    void (async () => {
      switch (route) {
        case 'GET /.well-known/openid-configuration':
          if (mis.discoveryDown) return json(res, 503, { error: 'temporarily_unavailable' });
          return json(res, 200, {
            issuer,
            authorization_endpoint: `${issuer}/authorize`,
            token_endpoint: `${issuer}/token`,
            jwks_uri: `${issuer}/jwks`,
            userinfo_endpoint: `${issuer}/userinfo`,
            response_types_supported: ['code'],
            grant_types_supported: ['authorization_code'],
            subject_types_supported: ['public'],
            id_token_signing_alg_values_supported: ['RS256'],
            code_challenge_methods_supported: ['S256'],
            token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'none'],
            scopes_supported: ['openid', 'email', 'profile'],
            claims_supported: ['sub', 'iss', 'aud', 'exp', 'iat', 'nonce', 'email', 'email_verified', 'name'],
            authorization_response_iss_parameter_supported: true,
          });
        case 'GET /jwks':
          return json(res, 200, { keys: [publicJwk] });
        case 'GET /authorize':
          return authorize(url, res);
        case 'POST /token':
          return token(req, res);
        case 'GET /userinfo': {
          const at = req.headers.authorization?.match(/^Bearer (.+)$/i)?.[1];
          const user = at ? accessTokens.get(at) : undefined;
          if (!user) return json(res, 401, { error: 'invalid_token' });
          if (mis.userInfoDown) {
            res.writeHead(503, { 'content-type': 'text/html' });
            res.end('<h1>Service Unavailable</h1>');
            return;
          }
          userInfoRequests++;
          return json(res, 200, {
            sub: mis.userInfoWrongSubject ? `not-${user.sub}` : user.sub,
            ...claimsOf(user),
          });
        }
        default:
          return json(res, 404, { error: 'not_found' });
      }
    })().catch((err: Error) => {
      if (!res.headersSent) json(res, 500, { error: 'server_error', error_description: err.message });
    });
  });
  issuer = server.url;

  return {
    issuer,
    clientId,
    clientSecret,
    addUser(user) {
      users.set(user.sub, user);
      defaultSub ??= user.sub;
    },
    setDefaultUser(sub) {
      defaultSub = sub;
    },
    misbehave(m) {
      mis = { ...m };
    },
    authorizeRequests,
    tokenRequests,
    get userInfoRequests() {
      return userInfoRequests;
    },
    close: () => server.close(),
  };
}

/** Server environment pointing OIDC sign-in at a fake provider. */
export function fakeOidcEnv(fake: FakeOidc): Record<string, string> {
  return {
    OIDC_ISSUER: fake.issuer,
    OIDC_CLIENT_ID: fake.clientId,
    ...(fake.clientSecret !== undefined ? { OIDC_CLIENT_SECRET: fake.clientSecret } : {}),
  };
}
