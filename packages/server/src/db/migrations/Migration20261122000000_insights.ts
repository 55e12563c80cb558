import { Migration } from './base.js';

/** Insights list a workspace's threads by activity: one index serves its filter and order. */
export class Migration20261122000000_insights extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      'create index app_threads_ws_activity_idx on app_threads (workspace_id, updated_at desc, id);',
    );
  }

  override async down(): Promise<void> {
    this.addSql('drop index if exists app_threads_ws_activity_idx;');
  }
}
