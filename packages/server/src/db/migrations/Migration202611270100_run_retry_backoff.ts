import { Migration } from './base.js';

/**
 * Retries with backoff on the run engine (docs/run-engine.md, "Retries"): a run whose execution
 * failed without deciding its outcome (the executor threw, or a graceful shutdown handed it
 * back) is released with `not_before`, the earliest time a worker may claim it again. A run
 * whose worker died waits `lease_expires_at` + the same backoff, computed by the claim.
 */
export class Migration202611270100_run_retry_backoff extends Migration {
  override async up(): Promise<void> {
    this.addSql('alter table runs add column not_before timestamptz;');
  }

  override async down(): Promise<void> {
    this.addSql('alter table runs drop column if exists not_before;');
  }
}
