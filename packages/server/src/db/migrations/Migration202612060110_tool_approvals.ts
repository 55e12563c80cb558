import { Migration } from './base.js';

/**
 * Tool approval (docs/agents.md, "Tool approval"): a call of a tool named in the agent's
 * `toolApproval` waits for a person's decision as a `tool_calls` row of kind `approval`, with
 * the tool's input schema (approved arguments are checked against it) and the decision's
 * outcome (`approved`, `denied`, or `expired` past its deadline). An approval of an autonomous
 * run with a webhook is announced to it (`run.approval_required`), delivered like the
 * completion webhook (`webhook_status` null until `delivered` or `failed`).
 */
export class Migration202612060110_tool_approvals extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table tool_calls add column kind text not null default 'result'
        check (kind in ('result', 'approval'));
      alter table tool_calls add column input_schema jsonb;
      alter table tool_calls add column webhook_status text;
      alter table tool_calls add column webhook_attempts integer not null default 0;
      alter table tool_calls add column webhook_next_at timestamptz;
      alter table tool_calls drop constraint if exists tool_calls_status_check;
      alter table tool_calls add constraint tool_calls_status_check
        check (status in ('pending', 'completed', 'failed', 'expired', 'approved', 'denied'));
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      delete from tool_calls where kind = 'approval';
      alter table tool_calls drop constraint if exists tool_calls_status_check;
      alter table tool_calls add constraint tool_calls_status_check
        check (status in ('pending', 'completed', 'failed', 'expired'));
      alter table tool_calls drop column if exists webhook_next_at;
      alter table tool_calls drop column if exists webhook_attempts;
      alter table tool_calls drop column if exists webhook_status;
      alter table tool_calls drop column if exists input_schema;
      alter table tool_calls drop column if exists kind;
    `);
  }
}
