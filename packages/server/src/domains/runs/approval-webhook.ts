import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { type OutboundPolicy, outboundRequest } from '../agents/outbound.js';
import { webhookHeaders } from '../agents/webhook-signature.js';

type Row = Record<string, unknown>;
const iso = (v: unknown) => (v == null ? null : (v instanceof Date ? v : new Date(String(v))).toISOString());
const json = (v: unknown) => (typeof v === 'string' ? JSON.parse(v) : v);

/** What the approval notice shares with the completion webhook's dispatcher. */
export interface ApprovalNoticeContext {
  em: () => EntityManager;
  log: Logger;
  policy: OutboundPolicy;
  signingSecret: string;
  opts: { timeoutMs: number; maxAttempts: number };
  backoff(attempt: number): number;
}

/**
 * Claims and attempts one due `run.approval_required` notice of an autonomous run with a
 * webhook (false when none is due): one dispatcher in any process, `FOR UPDATE SKIP LOCKED`
 * with a lease, retried with the completion webhook's backoff (docs/runs.md, "Waiting for a
 * decision"). A call decided (or expired) before its notice went out is not announced.
 * `webhook_status`: null until delivered, then `delivered` or `failed`.
 */
export async function deliverApprovalNotice(ctx: ApprovalNoticeContext): Promise<boolean> {
  const em = ctx.em();
  const leaseMs = ctx.opts.timeoutMs + 30_000;
  const rows = await em.execute<Row[]>(
    `update tool_calls t set webhook_attempts = t.webhook_attempts + 1, webhook_next_at = now() + ?::interval
     where t.id = (
       select c.id from tool_calls c join autonomous_runs a on a.run_id = c.run_id
       where c.kind = 'approval' and c.status = 'pending' and c.webhook_status is null
         and a.webhook_url is not null and (c.webhook_next_at is null or c.webhook_next_at <= now())
       order by c.created_at limit 1
       for update of c skip locked)
     returning t.*, (select row_to_json(a) from autonomous_runs a where a.run_id = t.run_id) as autonomous`,
    [`${leaseMs} milliseconds`],
  );
  const call = rows[0];
  if (!call) return false;
  const run = json(call.autonomous) as Row | null;
  const url = run?.webhook_url as string | undefined;
  if (!run || !url) return true;
  const attempt = Number(call.webhook_attempts);
  const deliveryId = String(call.id);
  const body = JSON.stringify({
    type: 'run.approval_required',
    id: deliveryId,
    runId: call.run_id,
    agentId: run.app_id,
    sessionId: call.session_id,
    status: 'running',
    task: run.task,
    toolCallId: call.id,
    name: call.name,
    arguments: json(call.arguments) ?? {},
    deadline: iso(call.deadline_at),
    metadata: json(run.metadata) ?? {},
    attempt,
    timestamp: new Date().toISOString(),
  });
  let error: string | null = null;
  try {
    const res = await outboundRequest(url, {
      policy: ctx.policy,
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'user-agent': 'ai-suite-webhooks/1',
        // The tool call id is the delivery id: the same on every retry.
        ...webhookHeaders(ctx.signingSecret, run.app_id as string, {
          id: deliveryId,
          event: 'run.approval_required',
          body,
        }),
      },
      body,
      timeoutMs: ctx.opts.timeoutMs,
      maxBytes: 64 * 1024,
      maxRedirects: 0,
    });
    if (res.status < 200 || res.status >= 300) error = `Webhook answered ${res.status}`;
  } catch (err) {
    error = err instanceof Error ? err.message : String(err);
  }
  if (error === null) {
    await em.execute(
      `update tool_calls set webhook_status = 'delivered', webhook_next_at = null where id = ?`,
      [call.id],
    );
  } else if (attempt >= ctx.opts.maxAttempts) {
    await em.execute(`update tool_calls set webhook_status = 'failed', webhook_next_at = null where id = ?`, [
      call.id,
    ]);
    ctx.log.warn({ toolCallId: call.id, attempt, error }, 'approval webhook failed permanently');
  } else {
    await em.execute(`update tool_calls set webhook_next_at = now() + ?::interval where id = ?`, [
      `${ctx.backoff(attempt)} milliseconds`,
      call.id,
    ]);
  }
  return true;
}
