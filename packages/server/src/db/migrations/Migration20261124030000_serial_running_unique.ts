import { Migration } from './base.js';

/**
 * At most one running run per serial key (a session's turns), enforced by the database: a
 * turn may now be claimed by the process that admits it, in the admitting statement, and two
 * concurrent admissions must not both start (docs/run-engine.md).
 */
export class Migration20261124030000_serial_running_unique extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create unique index runs_serial_running_uidx on runs (serial_key) where status = 'running' and serial_key is not null;`,
    );
  }

  override async down(): Promise<void> {
    this.addSql('drop index if exists runs_serial_running_uidx;');
  }
}
