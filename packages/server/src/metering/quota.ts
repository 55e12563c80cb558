import type { SqlExecutor } from '../db/sql.js';
import { appError } from '../errors/index.js';
import { cycleStart, nextCycleStart } from './cycle.js';

export interface TokenQuotaStatus {
  /** null: unlimited. */
  quota: number | null;
  used: number;
  cycleStart: Date;
  resetsAt: Date;
}

/** Joins `u.tokens, u.cycle_start`: the workspace's latest billing-cycle usage row, if any. */
const LATEST_CYCLE_USAGE = (workspaceId: string) => `left join lateral (
           select tokens, cycle_start from workspace_token_usage
            where workspace_id = ${workspaceId} order by cycle_start desc limit 1
         ) u on true`;

/** Tokens used in the billing cycle containing `now`, from the latest cycle row (or none). */
export function tokensUsedInCycle(
  start: Date,
  latest: { cycle_start: Date | string | null; tokens: string | number | null },
): number {
  return latest.cycle_start && new Date(latest.cycle_start).getTime() === start.getTime()
    ? Number(latest.tokens ?? 0)
    : 0;
}

/** The workspace's `/chat` token quota, what its current billing cycle used, and the next reset. */
export async function tokenQuotaStatus(
  db: () => SqlExecutor,
  workspaceId: string,
  now = new Date(),
): Promise<TokenQuotaStatus> {
  const rows = await db().execute<
    {
      quota: string | null;
      anchor: Date | string;
      tokens: string | null;
      cycle_start: Date | string | null;
    }[]
  >(
    `select w.monthly_token_quota as quota, w.billing_cycle_anchor as anchor, u.tokens, u.cycle_start
         from workspaces w
         ${LATEST_CYCLE_USAGE('w.id')}
        where w.id = ?`,
    [workspaceId],
  );
  const row = rows[0];
  if (!row) throw appError('WORKSPACE_NOT_FOUND');
  const anchor = new Date(row.anchor);
  const start = cycleStart(anchor, now);
  return {
    quota: row.quota === null ? null : Number(row.quota),
    used: tokensUsedInCycle(start, row),
    cycleStart: start,
    resetsAt: nextCycleStart(anchor, now),
  };
}
