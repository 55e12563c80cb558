import { Migration } from './base.js';

/**
 * Autonomous runs (docs/runs.md): what an autonomous run adds to a row of `runs` (its
 * idempotency key, task, completion webhook and its delivery state) and the artifacts it
 * wrote, each linking the run to a storage file of type `deliverable`.
 */
export class Migration20261121060001_autonomous_runs extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table autonomous_runs (
        run_id uuid primary key references runs (id) on delete cascade deferrable initially deferred,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        app_id uuid not null references apps (id) on delete cascade,
        session_id uuid not null,
        task text not null,
        message_id text,
        metadata jsonb not null default '{}',
        webhook_url text,
        webhook_status text not null default 'none'
          check (webhook_status in ('none', 'pending', 'delivered', 'failed')),
        webhook_attempts integer not null default 0,
        webhook_next_at timestamptz,
        webhook_last_error text,
        webhook_delivered_at timestamptz,
        created_at timestamptz not null default now()
      );
      create unique index autonomous_runs_message_idx on autonomous_runs (app_id, message_id)
        where message_id is not null;
      create index autonomous_runs_app_idx on autonomous_runs (workspace_id, app_id, created_at desc);
      create index autonomous_runs_webhook_idx on autonomous_runs (webhook_next_at)
        where webhook_status = 'pending';

      create table run_artifacts (
        id uuid primary key,
        run_id uuid not null references runs (id) on delete cascade,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        file_id uuid not null,
        filename text not null,
        mime_type text not null,
        size_bytes bigint not null,
        created_at timestamptz not null default clock_timestamp()
      );
      create unique index run_artifacts_name_idx on run_artifacts (run_id, filename);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists run_artifacts, autonomous_runs cascade;');
  }
}
