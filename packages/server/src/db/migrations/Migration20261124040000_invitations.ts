import { Migration } from './base.js';

/**
 * Invitations to a workspace (docs/identity.md). The link's token is signed (HMAC with the
 * server's signing secret over the invitation's id, workspace, email, role and expiry), so
 * nothing secret is stored here; `accepted_at` makes it single-use.
 */
export class Migration20261124040000_invitations extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table invitations (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        email text not null,
        role text not null check (role in ('owner', 'admin', 'member')),
        invited_by uuid references users (id) on delete set null,
        created_at timestamptz not null default now(),
        expires_at timestamptz not null,
        accepted_at timestamptz,
        accepted_by uuid references users (id) on delete set null,
        revoked_at timestamptz
      );
      create index invitations_ws_idx on invitations (workspace_id, created_at);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists invitations cascade;');
  }
}
