import { Migration } from './base.js';

/**
 * The trace context of the request that created a run (docs/observability.md, "Traces"): the
 * run's executions, in whatever process claims it, continue that trace.
 */
export class Migration202612060100_run_trace_parent extends Migration {
  override async up(): Promise<void> {
    this.addSql('alter table runs add column trace_parent text;');
  }

  override async down(): Promise<void> {
    this.addSql('alter table runs drop column if exists trace_parent;');
  }
}
