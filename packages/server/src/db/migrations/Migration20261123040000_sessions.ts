import { Migration } from './base.js';

/** Sessions of people signed in (docs/identity.md); a display name for users. */
export class Migration20261123040000_sessions extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table users add column name text;

      create table user_sessions (
        id uuid primary key,
        user_id uuid not null references users (id) on delete cascade,
        -- The workspace the session acts in; the role is read from memberships per request.
        workspace_id uuid references workspaces (id) on delete set null,
        token_hash text not null,
        method text not null check (method in ('password', 'oidc', 'invitation', 'signup')),
        created_at timestamptz not null default now(),
        last_seen_at timestamptz not null default now(),
        expires_at timestamptz not null,
        revoked_at timestamptz,
        ip text,
        user_agent text
      );
      create unique index user_sessions_token_uq on user_sessions (token_hash);
      create index user_sessions_user_idx on user_sessions (user_id, created_at) where revoked_at is null;
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists user_sessions cascade;');
    this.addSql('alter table users drop column if exists name;');
  }
}
