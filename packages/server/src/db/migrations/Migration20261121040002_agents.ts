import { Migration } from './base.js';

/** Managed-agent sessions, their message timeline and long-term memory notes. */
export class Migration20261121040002_agents extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table apps add column if not exists tool_bindings jsonb not null default '[]';
      alter table apps add column if not exists integration_bindings jsonb not null default '[]';

      create table agent_sessions (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        app_id uuid not null references apps (id) on delete cascade,
        title text,
        mount text,
        metadata jsonb not null default '{}',
        end_user_id text,
        origin_source text not null default 'api',
        kind text not null default 'chat',
        last_message_at timestamptz,
        created_at timestamptz not null default now()
      );
      create index agent_sessions_app_idx on agent_sessions (workspace_id, app_id, created_at);

      create table session_messages (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        session_id uuid not null references agent_sessions (id) on delete cascade,
        run_id uuid,
        role text not null check (role in ('user', 'assistant', 'tool')),
        content text not null,
        metadata jsonb not null default '{}',
        created_at timestamptz not null default clock_timestamp()
      );
      create index session_messages_session_idx on session_messages (session_id, created_at);

      create table agent_memories (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        app_id uuid references apps (id) on delete cascade,
        content text not null,
        created_at timestamptz not null default now()
      );
      create index agent_memories_scope_idx on agent_memories (workspace_id, app_id, created_at);
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop table if exists agent_memories, session_messages, agent_sessions cascade;
      alter table apps drop column if exists tool_bindings;
      alter table apps drop column if exists integration_bindings;
    `);
  }
}
