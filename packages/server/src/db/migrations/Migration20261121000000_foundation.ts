import { Migration } from './base.js';

/** Workspaces, users, memberships, API keys, credit ledger, apps. */
export class Migration20261121000000_foundation extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table workspaces (
        id uuid primary key,
        name text not null,
        status text not null default 'active' check (status in ('active', 'suspended')),
        monthly_token_quota bigint check (monthly_token_quota is null or monthly_token_quota >= 0),
        billing_cycle_anchor timestamptz not null default now(),
        credit_balance_micros bigint not null default 0,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create unique index workspaces_name_uq on workspaces (lower(name));

      create table users (
        id uuid primary key,
        email text not null,
        password_hash text,
        created_at timestamptz not null default now()
      );
      create unique index users_email_uq on users (lower(email));

      create table memberships (
        workspace_id uuid not null references workspaces (id) on delete cascade,
        user_id uuid not null references users (id) on delete cascade,
        role text not null check (role in ('owner', 'admin', 'member')),
        created_at timestamptz not null default now(),
        primary key (workspace_id, user_id)
      );

      create table api_keys (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        name text,
        key_hash text not null,
        key_prefix text not null,
        created_by uuid references users (id) on delete set null,
        created_at timestamptz not null default now(),
        last_used_at timestamptz,
        revoked_at timestamptz,
        request_count bigint not null default 0,
        input_tokens bigint not null default 0,
        output_tokens bigint not null default 0,
        cost_micros bigint not null default 0
      );
      create unique index api_keys_hash_uq on api_keys (key_hash);
      create index api_keys_active_idx on api_keys (workspace_id) where revoked_at is null;

      create table credit_ledger (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        amount_micros bigint not null,
        balance_after_micros bigint not null,
        kind text not null check (kind in ('grant', 'debit', 'refund', 'adjustment')),
        reason text,
        ref text,
        created_at timestamptz not null default now()
      );
      create index credit_ledger_ws_idx on credit_ledger (workspace_id, created_at);

      create table apps (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        app_type text not null default 'app' check (app_type in ('app', 'agent')),
        name text not null,
        description text,
        business_use_case text,
        system_prompt text,
        model_id text,
        config jsonb not null default '{}',
        status text not null default 'active' check (status in ('active', 'draft')),
        is_public boolean not null default false,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create index apps_ws_type_idx on apps (workspace_id, app_type, created_at);

      -- Server-wide settings shared by every process (e.g. the generated signing secret).
      create table server_settings (
        key text primary key,
        value text not null,
        created_at timestamptz not null default now()
      );
    `);
  }

  override async down(): Promise<void> {
    this.addSql(
      'drop table if exists server_settings, apps, credit_ledger, api_keys, memberships, users, workspaces cascade;',
    );
  }
}
