import { Migration } from './base.js';

/** Usage records, per-cycle token usage of each workspace, and rate-limit windows. */
export class Migration20261121010000_metering extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table usage_records (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        api_key_id uuid references api_keys (id) on delete set null,
        app_id text,
        thread_id text,
        session_id text,
        run_id text,
        request_id text not null,
        endpoint text not null,
        model text not null,
        meter text not null check (meter in ('tokens', 'credits')),
        input_tokens bigint not null default 0 check (input_tokens >= 0),
        output_tokens bigint not null default 0 check (output_tokens >= 0),
        cost_micros bigint not null default 0 check (cost_micros >= 0),
        provider_status text not null,
        latency_ms integer not null default 0,
        component_lines jsonb not null default '[]',
        created_at timestamptz not null default now()
      );
      create index usage_records_ws_idx on usage_records (workspace_id, created_at desc);
      create index usage_records_thread_idx on usage_records (thread_id) where thread_id is not null;
      create index usage_records_session_idx on usage_records (session_id) where session_id is not null;
      create index usage_records_request_idx on usage_records (request_id);

      -- What the last debit took: written in the same UPDATE as the balance, so a single
      -- statement both clamps the debit and reports how much it took (SET sees the old row).
      alter table workspaces add column last_debit_micros bigint not null default 0;

      -- Tokens of the token-metered endpoints (/chat) per workspace and billing cycle.
      create table workspace_token_usage (
        workspace_id uuid not null references workspaces (id) on delete cascade,
        cycle_start timestamptz not null,
        tokens bigint not null default 0,
        updated_at timestamptz not null default now(),
        primary key (workspace_id, cycle_start)
      );

      -- Fixed-window request counters shared by every server process.
      create table rate_limit_windows (
        key text primary key,
        window_start timestamptz not null,
        hits integer not null
      );
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists rate_limit_windows, workspace_token_usage, usage_records cascade;');
    this.addSql('alter table workspaces drop column if exists last_debit_micros;');
  }
}
