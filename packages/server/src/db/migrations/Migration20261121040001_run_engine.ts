import { Migration } from './base.js';

/**
 * The run engine (docs/run-engine.md): runs leased by workers, their append-only event log,
 * and tool calls that wait on someone outside the service.
 */
export class Migration20261121040001_run_engine extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table runs (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        kind text not null check (kind in ('turn', 'autonomous')),
        status text not null default 'pending'
          check (status in ('pending', 'running', 'completed', 'failed', 'cancelled')),
        app_id uuid,
        session_id uuid,
        serial_key text,
        input jsonb not null default '{}',
        state jsonb,
        waiting boolean not null default false,
        lease_owner text,
        lease_expires_at timestamptz,
        heartbeat_at timestamptz,
        attempts integer not null default 0,
        max_attempts integer not null default 1,
        last_seq integer not null default 0,
        error text,
        created_at timestamptz not null default now(),
        started_at timestamptz,
        completed_at timestamptz,
        updated_at timestamptz not null default now()
      );
      create index runs_claimable_idx on runs (created_at) where status in ('pending', 'running');
      create index runs_session_idx on runs (session_id, created_at);
      create index runs_serial_idx on runs (serial_key) where status in ('pending', 'running');

      create table run_events (
        run_id uuid not null references runs (id) on delete cascade,
        seq integer not null,
        type text not null,
        payload jsonb not null default '{}',
        created_at timestamptz not null default now(),
        primary key (run_id, seq)
      );

      create table tool_calls (
        id text primary key,
        run_id uuid not null references runs (id) on delete cascade,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        session_id uuid,
        model_call_id text not null,
        name text not null,
        arguments jsonb not null default '{}',
        status text not null default 'pending'
          check (status in ('pending', 'completed', 'failed', 'expired')),
        result jsonb,
        error text,
        deadline_at timestamptz not null,
        created_at timestamptz not null default now(),
        completed_at timestamptz
      );
      create index tool_calls_run_idx on tool_calls (run_id);
      create index tool_calls_pending_idx on tool_calls (deadline_at) where status = 'pending';
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists tool_calls, run_events, runs cascade;');
  }
}
