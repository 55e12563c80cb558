import { Migration } from './base.js';

/**
 * Agent schedules (docs/agents.md, "Schedules"; decision 0045): a cron expression in an IANA
 * time zone that starts an autonomous run of the agent at each tick. `next_run_at` is the
 * tick to fire next (null while paused); the tick is claimed by locking the schedule row and
 * firing in the same transaction that inserts the run. `schedule_ticks` is the history: one
 * row per fired tick (unique on the schedule and the tick's time) saying whether a run
 * started, was skipped (overlap "skip") or failed to start, and one per "run now".
 */
export class Migration202612060200_agent_schedules extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table agent_schedules (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        app_id uuid not null references apps (id) on delete cascade,
        cron text not null,
        timezone text not null default 'UTC',
        task text not null,
        enabled boolean not null default true,
        overlap text not null default 'skip' check (overlap in ('skip', 'queue')),
        metadata jsonb not null default '{}',
        next_run_at timestamptz,
        last_run_at timestamptz,
        last_run_id uuid,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create index agent_schedules_app_idx on agent_schedules (workspace_id, app_id, created_at);
      create index agent_schedules_due_idx on agent_schedules (next_run_at) where enabled;

      create table schedule_ticks (
        id uuid primary key,
        schedule_id uuid not null references agent_schedules (id) on delete cascade,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        tick_at timestamptz not null,
        trigger text not null check (trigger in ('schedule', 'manual')),
        status text not null check (status in ('started', 'skipped', 'failed')),
        run_id uuid,
        reason text,
        created_at timestamptz not null default now()
      );
      create unique index schedule_ticks_tick_idx on schedule_ticks (schedule_id, tick_at)
        where trigger = 'schedule';
      create index schedule_ticks_history_idx on schedule_ticks (schedule_id, created_at desc);

      alter table autonomous_runs add column schedule_id uuid;
      create index autonomous_runs_schedule_idx on autonomous_runs (app_id, schedule_id, created_at desc)
        where schedule_id is not null;
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop index if exists autonomous_runs_schedule_idx;
      alter table autonomous_runs drop column if exists schedule_id;
      drop table if exists schedule_ticks;
      drop table if exists agent_schedules;
    `);
  }
}
