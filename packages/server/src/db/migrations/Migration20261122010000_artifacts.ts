import { Migration } from './base.js';

/** Reports made by `POST /artifacts/generate`, with what they cost and the caller's reference. */
export class Migration20261122010000_artifacts extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table artifact_reports (
        id uuid primary key,
        workspace_id uuid not null references workspaces (id) on delete cascade,
        app_id uuid references apps (id) on delete set null,
        request_id text not null,
        template_id text not null,
        external_ref text,
        model text not null,
        input_tokens bigint not null default 0,
        output_tokens bigint not null default 0,
        cost_micros bigint not null default 0,
        snapshot jsonb not null,
        created_at timestamptz not null default now()
      );
      create index artifact_reports_ws_idx on artifact_reports (workspace_id, created_at desc);
      create index artifact_reports_ref_idx on artifact_reports (workspace_id, external_ref) where external_ref is not null;
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists artifact_reports;');
  }
}
