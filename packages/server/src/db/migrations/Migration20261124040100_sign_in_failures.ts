import { Migration } from './base.js';

/**
 * Failed sign-in counters (auth/throttle.ts), in the shape rate-limiter-flexible's Postgres
 * store reads and writes: `key` (`account:<email>` / `address:<ip>`), `points` (failures in the
 * window), `expire` (epoch milliseconds when the window ends).
 */
export class Migration20261124040100_sign_in_failures extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table sign_in_failures (
        key varchar(255) primary key,
        points integer not null default 0,
        expire bigint
      );
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists sign_in_failures cascade;');
  }
}
