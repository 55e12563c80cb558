import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { OidcIdentity } from '../../auth/oidc.js';
import type { IdentitySettings } from '../../auth/settings.js';
import { appError } from '../../errors/index.js';
import { createOwnWorkspace } from '../members/service.js';
import type { Role } from '../workspaces/entities.js';
import { normalizeEmail } from './service.js';

/** Who an OIDC sign-in is, and the workspace its session should act in (default: the first). */
export interface OidcSignInResult {
  userId: string;
  workspaceId?: string;
  /** How the user was found: an identity linked before, an existing account by email, or new. */
  outcome: 'identity' | 'linked' | 'created';
}

const EMAIL_PATTERN = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

/**
 * Turns an identity the provider vouched for into a user of ours (decision 0026):
 *
 * 1. The provider must give an email it has verified (`email_verified: true`), on every
 *    sign-in: 401 `OIDC_EMAIL_MISSING` without one, 403 `OIDC_EMAIL_UNVERIFIED` otherwise. An
 *    unverified email therefore never links to, nor creates, an account.
 * 2. With `OIDC_ALLOWED_DOMAINS`, the email's domain must be one of them (exactly; no
 *    subdomains): 403 `OIDC_DOMAIN_NOT_ALLOWED`.
 * 3. An identity `(issuer, subject)` linked before signs in as its user.
 * 4. Otherwise the account with that email is linked to the identity, unless it is already
 *    linked to another identity of the same provider (409 `OIDC_IDENTITY_CONFLICT`: a
 *    provider that reassigned the address must not hand over the account).
 * 5. Otherwise an account is created only if the email has pending invitations (it joins those
 *    workspaces with the invited roles, the invitations accepted) or `AUTH_SIGNUP_ENABLED`
 *    (it owns a new workspace, like sign-up); else 403 `SIGNUP_DISABLED`.
 */
export class OidcSignInService {
  constructor(
    private readonly em: EntityManager,
    private readonly settings: IdentitySettings,
  ) {}

  async resolve(identity: OidcIdentity): Promise<OidcSignInResult> {
    const email = identity.email ? normalizeEmail(identity.email) : undefined;
    if (!email || !EMAIL_PATTERN.test(email) || email.length > 320) {
      throw appError('OIDC_EMAIL_MISSING');
    }
    if (!identity.emailVerified) {
      throw appError('OIDC_EMAIL_UNVERIFIED');
    }
    const domain = email.slice(email.lastIndexOf('@') + 1);
    const allowed = this.settings.oidc?.allowedDomains ?? [];
    if (allowed.length > 0 && !allowed.includes(domain)) {
      throw appError('OIDC_DOMAIN_NOT_ALLOWED', {
        details: {
          domain,
        },
      });
    }
    return this.em.transactional(async (em) => {
      const linked = await em.execute<{ user_id: string }[]>(
        `update user_identities set last_sign_in_at = now(), email = ?
          where issuer = ? and subject = ? returning user_id`,
        [email, identity.issuer, identity.subject],
      );
      if (linked[0]) return { userId: linked[0].user_id, outcome: 'identity' as const };

      const users = await em.execute<{ id: string }[]>(
        'select id from users where lower(email) = ? for update',
        [email],
      );
      const existing = users[0];
      if (existing) {
        await this.link(em, existing.id, identity, email);
        return { userId: existing.id, outcome: 'linked' as const };
      }

      const invitations = await em.execute<{ id: string; workspace_id: string; role: Role }[]>(
        `select i.id, i.workspace_id, i.role
           from invitations i join workspaces w on w.id = i.workspace_id and w.status = 'active'
          where lower(i.email) = ? and i.accepted_at is null and i.revoked_at is null and i.expires_at > now()
          order by i.created_at desc
          for update of i`,
        [email],
      );
      if (invitations.length === 0 && !this.settings.signupEnabled) {
        throw appError('SIGNUP_DISABLED_UNINVITED');
      }
      const userId = randomUUID();
      const inserted = await em.execute(
        `insert into users (id, email, password_hash, name) values (?, ?, null, ?)
         on conflict ((lower(email))) do nothing returning id`,
        [userId, email, identity.name ?? null],
      );
      if (inserted.length === 0) throw appError('ACCOUNT_JUST_CREATED_SIGN_IN_AGAIN');
      await this.link(em, userId, identity, email);
      if (invitations.length > 0) {
        for (const inv of invitations) {
          await em.execute('update invitations set accepted_at = now(), accepted_by = ? where id = ?', [
            userId,
            inv.id,
          ]);
          await em.execute(
            `insert into memberships (workspace_id, user_id, role) values (?, ?, ?)
             on conflict (workspace_id, user_id) do nothing`,
            [inv.workspace_id, userId, inv.role],
          );
        }
        return { userId, workspaceId: invitations[0]?.workspace_id, outcome: 'created' as const };
      }
      const workspaceId = await createOwnWorkspace(em, userId, email);
      return { userId, workspaceId, outcome: 'created' as const };
    });
  }

  private async link(em: EntityManager, userId: string, identity: OidcIdentity, email: string) {
    const inserted = await em.execute(
      `insert into user_identities (id, user_id, issuer, subject, email) values (?, ?, ?, ?, ?)
       on conflict do nothing returning id`,
      [randomUUID(), userId, identity.issuer, identity.subject, email],
    );
    if (inserted.length === 0) {
      throw appError('OIDC_IDENTITY_CONFLICT');
    }
  }
}
