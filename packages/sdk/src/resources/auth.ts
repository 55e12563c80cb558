import type { AiSuite } from '../client.js';
import { APIPromise } from '../core/api-promise.js';
import type {
  AuthProviders,
  AuthSession,
  InvitationPreview,
  PasswordChanged,
  SessionListItem,
  SignedIn,
} from './types.js';

/**
 * A person's sign-in and sessions (`/auth/*`). `signIn` and `switchWorkspace` hand the new
 * session token to the client, so the same client then acts as that person:
 *
 * ```ts
 * const client = new AiSuite({ baseURL });
 * await client.auth.signIn({ email, password });
 * await client.apiKeys.list();
 * ```
 */
export class Auth {
  constructor(private readonly client: AiSuite) {}

  /**
   * How people can sign in on this server (public): password, open sign-up, and the identity
   * provider (`oidc`: its name and start URL, or null when OIDC is not configured).
   */
  providers(opts: { signal?: AbortSignal } = {}): APIPromise<AuthProviders> {
    return this.client.request({ method: 'GET', path: '/auth/providers', noAuth: true, ...opts });
  }

  /**
   * The URL a browser opens to sign in with the identity provider (OIDC). It is a page
   * navigation, not an API call: the server redirects to the provider and, once the person has
   * signed in there, back to `returnTo` (a path on the server's site, default `/`) with the
   * session cookie set.
   */
  oidcSignInUrl(opts: { returnTo?: string; loginHint?: string } = {}): string {
    const url = new URL(`${this.client.baseURL}/auth/oidc/start`);
    if (opts.returnTo !== undefined) url.searchParams.set('returnTo', opts.returnTo);
    if (opts.loginHint !== undefined) url.searchParams.set('loginHint', opts.loginHint);
    return url.toString();
  }

  /**
   * Changes the signed-in person's password and signs out their other sessions (this client's
   * session keeps working). A wrong `currentPassword` is `BadRequestError` (code
   * `INVALID_CURRENT_PASSWORD`); repeated ones are throttled like failed sign-ins (429).
   */
  changePassword(
    body: { currentPassword: string; newPassword: string },
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<PasswordChanged> {
    return this.client.request({
      method: 'POST',
      path: '/auth/password',
      body,
      maxRetries: 0,
      ...opts,
    });
  }

  /** Email and password; 401 `Invalid email or password`, 429 after repeated failures. */
  signIn(
    body: { email: string; password: string; workspaceId?: string },
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<SignedIn> {
    return this.adopt(
      this.client.request<SignedIn>({
        method: 'POST',
        path: '/auth/sign-in',
        body,
        noAuth: true,
        maxRetries: 0,
        ...opts,
      }),
    );
  }

  /**
   * Creates an account owning a new workspace, signed in (only when the server has
   * `AUTH_SIGNUP_ENABLED`; otherwise `PermissionDeniedError` "Sign-up is disabled").
   */
  signUp(
    body: { email: string; password: string; name?: string | null; workspaceName?: string },
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<SignedIn> {
    return this.adopt(
      this.client.request<SignedIn>({
        method: 'POST',
        path: '/auth/sign-up',
        body,
        noAuth: true,
        maxRetries: 0,
        ...opts,
      }),
    );
  }

  /** What an invitation token offers (workspace, email, role, expiry, whether the account exists). */
  previewInvitation(token: string, opts: { signal?: AbortSignal } = {}): APIPromise<InvitationPreview> {
    return this.client.request({
      method: 'POST',
      path: '/auth/invitations/preview',
      body: { token },
      noAuth: true,
      ...opts,
    });
  }

  /**
   * Accepts an invitation and adopts the session it opens. A new account needs `password`; an
   * existing one needs this client signed in as that person, or its `password`.
   */
  acceptInvitation(
    body: { token: string; password?: string; name?: string | null },
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<SignedIn> {
    return this.adopt(
      this.client.request<SignedIn>({
        method: 'POST',
        path: '/auth/invitations/accept',
        body,
        maxRetries: 0,
        ...opts,
      }),
    );
  }

  /** The session of this client: user, workspace and role, expiry. */
  session(opts: { signal?: AbortSignal } = {}): APIPromise<AuthSession> {
    return this.client.request({ method: 'GET', path: '/auth/session', ...opts });
  }

  /** Act in another of the user's workspaces; the token rotates (the client keeps the new one). */
  switchWorkspace(workspaceId: string, opts: { signal?: AbortSignal } = {}): APIPromise<SignedIn> {
    return this.adopt(
      this.client.request<SignedIn>({
        method: 'POST',
        path: '/auth/workspace',
        body: { workspaceId },
        maxRetries: 0,
        ...opts,
      }),
    );
  }

  /** Revokes this session; the client forgets its token. */
  signOut(opts: { signal?: AbortSignal } = {}): APIPromise<{ signedOut: true }> {
    const p = this.client.request<{ signedOut: true }>({
      method: 'POST',
      path: '/auth/sign-out',
      body: {},
      maxRetries: 0,
      ...opts,
    });
    return new APIPromise(
      p.withResponse().then((r) => {
        this.client.setSessionToken(undefined);
        return r;
      }),
    );
  }

  /** The user's live sessions (`current` marks this one). */
  listSessions(opts: { signal?: AbortSignal } = {}): APIPromise<{ sessions: SessionListItem[] }> {
    return this.client.request({ method: 'GET', path: '/auth/sessions', ...opts });
  }

  /** Revokes one of the user's own sessions; 404 `Session not found` for any other id. */
  revokeSession(
    sessionId: string,
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<{ revoked: true; sessionId: string }> {
    return this.client.request({
      method: 'DELETE',
      path: `/auth/sessions/${encodeURIComponent(sessionId)}`,
      ...opts,
    });
  }

  private adopt(p: APIPromise<SignedIn>): APIPromise<SignedIn> {
    return new APIPromise(
      p.withResponse().then((r) => {
        this.client.setSessionToken(r.data.token);
        return r;
      }),
    );
  }
}
