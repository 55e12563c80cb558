import { Migration } from './base.js';

/**
 * Credit holds as rows (so a crashed process's holds can be found and settled) and the
 * in-flight token reservations of the `/chat` quota (decision 0020).
 */
export class Migration20261124020000_metering_holds extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      -- One row per credit generation in flight: what it took off the balance (held_micros) and
      -- what it had used at its last top-up (used_micros, tokens). The process that holds it
      -- extends expires_at; once expired (the process died), the run engine's sweep settles it:
      -- refunds held - used and writes the usage record from 'record'.
      create table credit_holds (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        reason text not null,
        ref text,
        held_micros bigint not null check (held_micros >= 0),
        used_micros bigint not null default 0 check (used_micros >= 0),
        input_tokens bigint not null default 0,
        output_tokens bigint not null default 0,
        record jsonb not null,
        expires_at timestamptz not null,
        created_at timestamptz not null default now()
      );
      create index credit_holds_expiry_idx on credit_holds (expires_at);

      -- /chat quota: tokens reserved by the requests in flight, summed per workspace and cycle
      -- (reserved), one row per reservation (released with the request's usage record, or
      -- dropped by the run engine's sweep once expired when its process died).
      alter table workspace_token_usage add column reserved bigint not null default 0;
      create table token_reservations (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        cycle_start timestamptz not null,
        tokens bigint not null,
        expires_at timestamptz not null
      );
      create index token_reservations_expiry_idx on token_reservations (expires_at);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists credit_holds, token_reservations cascade;');
    this.addSql('alter table workspace_token_usage drop column if exists reserved;');
  }
}
