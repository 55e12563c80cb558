import { Migration } from './base.js';

/** App memory (threads, messages) and widget tokens. */
export class Migration20261121050000_apps extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table app_threads (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        app_id uuid not null references apps (id) on delete cascade,
        session_id text,
        title text not null default 'New Thread',
        status text not null default 'active' check (status in ('active', 'archived', 'closed')),
        -- Also the last sequence number: messages are never removed, and the counter is
        -- bumped in the same statement that reserves numbers, so sequences stay gapless.
        message_count integer not null default 0,
        metadata jsonb not null default '{}',
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create index app_threads_app_idx on app_threads (workspace_id, app_id, updated_at desc);
      create index app_threads_user_idx on app_threads (app_id, (metadata ->> 'external_user_id'));

      create table app_thread_messages (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        app_id uuid not null references apps (id) on delete cascade,
        thread_id uuid not null references app_threads (id) on delete cascade,
        role text not null check (role in ('user', 'assistant', 'system')),
        content text not null,
        sequence_number integer not null,
        request_id text,
        turn_id text,
        provider_status text not null default 'success',
        error_code text,
        latency_ms integer not null default 0,
        input_tokens integer not null default 0,
        output_tokens integer not null default 0,
        cost_micros bigint not null default 0,
        rag_sources jsonb not null default '[]',
        metadata jsonb not null default '{}',
        created_at timestamptz not null default now(),
        unique (thread_id, sequence_number)
      );
      create index app_thread_messages_app_idx on app_thread_messages (workspace_id, app_id);

      create table widget_tokens (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        app_id uuid references apps (id) on delete cascade,
        name text,
        token_hash text not null,
        token_prefix text not null,
        subject text,
        allowed_origins text[] not null default '{}',
        max_requests integer,
        request_count integer not null default 0,
        expires_at timestamptz not null,
        revoked_at timestamptz,
        created_by_key_id uuid references api_keys (id) on delete set null,
        last_used_at timestamptz,
        created_at timestamptz not null default now()
      );
      create unique index widget_tokens_hash_uq on widget_tokens (token_hash);
      create index widget_tokens_ws_idx on widget_tokens (workspace_id, created_at desc);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists widget_tokens, app_thread_messages, app_threads cascade;');
  }
}
