import { Migration } from './base.js';

/**
 * Accounts at an OpenID Connect provider linked to users (docs/identity.md, decision 0026): a
 * provider's person is its `(issuer, subject)`, never its email (emails change and are
 * reassigned). A user has at most one identity per issuer.
 */
export class Migration202611250100_user_identities extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table user_identities (
        id uuid primary key,
        user_id uuid not null references users (id) on delete cascade,
        issuer text not null,
        subject text not null,
        -- The email the provider gave at the last sign-in (for operators; never used to match).
        email text,
        created_at timestamptz not null default now(),
        last_sign_in_at timestamptz not null default now()
      );
      create unique index user_identities_subject_uq on user_identities (issuer, subject);
      create unique index user_identities_user_uq on user_identities (user_id, issuer);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists user_identities cascade;');
  }
}
