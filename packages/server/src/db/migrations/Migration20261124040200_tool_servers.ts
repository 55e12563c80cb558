import { Migration } from './base.js';

/**
 * MCP servers connected to a workspace (docs/identity.md, "Tool servers"). The optional auth
 * header value is stored encrypted (AES-256-GCM, key derived from the signing secret); the
 * tool list is what the server answered when it was connected.
 */
export class Migration20261124040200_tool_servers extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table tool_servers (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        name text not null,
        url text not null,
        auth_header_name text,
        auth_header_secret text,
        enabled boolean not null default true,
        tools jsonb not null default '[]',
        created_by uuid references users (id) on delete set null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create unique index tool_servers_name_uq on tool_servers (workspace_id, lower(name));
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists tool_servers cascade;');
  }
}
