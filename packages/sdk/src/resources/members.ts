import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import type { CreatedInvitation, Invitation, Member, Role } from './types.js';

/** Invitations to the session's workspace (owners and admins). */
export class Invitations {
  constructor(private readonly client: AiSuite) {}

  /** A signed, single-use link (`url`, `token`), mailed too when the server has SMTP. */
  create(
    body: { email: string; role?: Role },
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<CreatedInvitation> {
    return this.client.inWorkspace('/invitations', (path) =>
      this.client.request({ method: 'POST', path, body, maxRetries: 0, ...opts }),
    );
  }

  list(opts: { signal?: AbortSignal } = {}): APIPromise<{ invitations: Invitation[] }> {
    return this.client.inWorkspace('/invitations', (path) =>
      this.client.request({ method: 'GET', path, ...opts }),
    );
  }

  revoke(invitationId: string, opts: { signal?: AbortSignal } = {}): APIPromise<{ invitation: Invitation }> {
    return this.client.inWorkspace(`/invitations/${encodeURIComponent(invitationId)}`, (path) =>
      this.client.request({ method: 'DELETE', path, ...opts }),
    );
  }
}

/**
 * Members and roles of the workspace the client's session acts in. Owners and admins change
 * roles and remove members (only owners touch the owner role; the last owner stays:
 * `ConflictError` `LAST_OWNER`); anyone may `leave`.
 */
export class Members {
  readonly invitations: Invitations;

  constructor(private readonly client: AiSuite) {
    this.invitations = new Invitations(client);
  }

  list(opts: { signal?: AbortSignal } = {}): APIPromise<{ members: Member[] }> {
    return this.client.inWorkspace('/members', (path) =>
      this.client.request({ method: 'GET', path, ...opts }),
    );
  }

  setRole(userId: string, role: Role, opts: { signal?: AbortSignal } = {}): APIPromise<{ member: Member }> {
    return this.client.inWorkspace(`/members/${encodeURIComponent(userId)}`, (path) =>
      this.client.request({ method: 'PATCH', path, body: { role }, ...opts }),
    );
  }

  remove(userId: string, opts: { signal?: AbortSignal } = {}): APIPromise<{ removed: true; userId: string }> {
    return this.client.inWorkspace(`/members/${encodeURIComponent(userId)}`, (path) =>
      this.client.request({ method: 'DELETE', path, ...opts }),
    );
  }

  /** Leaves the workspace (removes the signed-in person's own membership). */
  async leave(opts: { signal?: AbortSignal } = {}): Promise<{ removed: true; userId: string }> {
    const session = await this.client.auth.session(opts);
    return this.remove(session.user.id, opts);
  }
}
