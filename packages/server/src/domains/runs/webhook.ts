import type { ServerDeps } from '../../context.js';
import { countWebhookDelivery } from '../../telemetry/metrics.js';
import { type OutboundPolicy, outboundRequest, parseAllowlist } from '../agents/outbound.js';
import { webhookHeaders } from '../agents/webhook-signature.js';
import { type ApprovalNoticeContext, deliverApprovalNotice } from './approval-webhook.js';
import { listArtifacts } from './service.js';

type Row = Record<string, unknown>;
const iso = (v: unknown) => (v == null ? null : (v instanceof Date ? v : new Date(String(v))).toISOString());
const num = (v: string | undefined, d: number) => (v && Number.isFinite(Number(v)) ? Number(v) : d);

export interface WebhookOptions {
  pollMs: number;
  timeoutMs: number;
  maxAttempts: number;
  backoffMs: number;
  maxBackoffMs: number;
}

/** Delay before attempt `attempt + 1` after `attempt` failed: exponential, capped. */
export const backoffDelay = (o: WebhookOptions, attempt: number) =>
  Math.min(o.maxBackoffMs, o.backoffMs * 2 ** Math.max(0, attempt - 1));

/**
 * Delivers the completion webhook of autonomous runs (docs/runs.md): once a run is terminal,
 * one worker (in any process) claims its delivery with `FOR UPDATE SKIP LOCKED`, POSTs the
 * signed payload through the SSRF guard, and marks it delivered; failures retry with
 * exponential backoff until `RUN_WEBHOOK_MAX_ATTEMPTS`.
 */
export class RunWebhookDispatcher {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private again = false;
  private offWake: (() => void) | undefined;
  private readonly policy: OutboundPolicy;
  readonly opts: WebhookOptions;
  /** `run.approval_required` notices, delivered by the same dispatcher (approval-webhook.ts). */
  private readonly notices: ApprovalNoticeContext;

  constructor(private readonly deps: ServerDeps) {
    const env = deps.config.env;
    this.policy = parseAllowlist(env.OUTBOUND_ALLOWLIST);
    this.opts = {
      pollMs: num(env.RUN_WEBHOOK_POLL_MS, 1000),
      timeoutMs: num(env.RUN_WEBHOOK_TIMEOUT_MS, 10_000),
      maxAttempts: Math.max(1, num(env.RUN_WEBHOOK_MAX_ATTEMPTS, 6)),
      backoffMs: num(env.RUN_WEBHOOK_BACKOFF_MS, 5000),
      maxBackoffMs: num(env.RUN_WEBHOOK_MAX_BACKOFF_MS, 600_000),
    };
    this.notices = {
      em: deps.em,
      log: deps.log,
      policy: this.policy,
      signingSecret: deps.config.signingSecret as string,
      opts: this.opts,
      backoff: (attempt) => backoffDelay(this.opts, attempt),
    };
  }

  start(): void {
    this.stopped = false;
    this.timer = setInterval(() => this.kick(), this.opts.pollMs);
    this.timer.unref();
    // Runs end with a wake on the bus (engine `finally`, cancel): deliver without waiting.
    this.offWake = this.deps.runs.bus.onWake(() => this.kick());
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.offWake?.();
    await this.running;
  }

  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = (async () => {
      do {
        this.again = false;
        try {
          while (
            !this.stopped &&
            ((await this.deliverOne()) || (await deliverApprovalNotice(this.notices)))
          ) {}
        } catch (err) {
          if (!this.stopped) this.deps.log.warn({ err }, 'run webhook dispatch failed');
        }
      } while (this.again && !this.stopped);
    })().finally(() => {
      this.running = undefined;
    });
  }

  /** Claims and attempts one due delivery; false when none is due. */
  private async deliverOne(): Promise<boolean> {
    const em = this.deps.em();
    const leaseMs = this.opts.timeoutMs + 30_000;
    const rows = await em.execute<Row[]>(
      `update autonomous_runs a set webhook_attempts = a.webhook_attempts + 1,
         webhook_next_at = now() + ?::interval
       where a.run_id = (
         select c.run_id from autonomous_runs c join runs r on r.id = c.run_id
         where c.webhook_status = 'pending' and r.status in ('completed', 'failed', 'cancelled')
           and (c.webhook_next_at is null or c.webhook_next_at <= now())
         order by c.created_at limit 1
         for update of c skip locked)
       returning a.*`,
      [`${leaseMs} milliseconds`],
    );
    const claim = rows[0];
    if (!claim) return false;
    const runId = claim.run_id as string;
    const attempt = Number(claim.webhook_attempts);
    const runRows = await em.execute<Row[]>('select * from runs where id = ?', [runId]);
    const run = runRows[0] as Row;
    const status = run.status as string;
    const body = JSON.stringify({
      type: `run.${status}`,
      id: runId,
      runId,
      agentId: claim.app_id,
      sessionId: claim.session_id,
      status,
      task: claim.task,
      error: (run.error as string) ?? null,
      created_at: iso(run.created_at),
      started_at: iso(run.started_at),
      completed_at: iso(run.completed_at),
      metadata: typeof claim.metadata === 'string' ? JSON.parse(claim.metadata) : (claim.metadata ?? {}),
      artifacts: await listArtifacts(em, runId),
      attempt,
      timestamp: new Date().toISOString(),
    });
    let error: string | null = null;
    try {
      const res = await outboundRequest(claim.webhook_url as string, {
        policy: this.policy,
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'user-agent': 'ai-suite-webhooks/1',
          // The run id is the delivery id: the same on every retry, as receivers deduplicate on it.
          ...webhookHeaders(this.deps.config.signingSecret as string, claim.app_id as string, {
            id: runId,
            event: `run.${status}`,
            body,
          }),
        },
        body,
        timeoutMs: this.opts.timeoutMs,
        maxBytes: 64 * 1024,
        maxRedirects: 0,
      });
      if (res.status < 200 || res.status >= 300) error = `Webhook answered ${res.status}`;
    } catch (err) {
      error = err instanceof Error ? err.message : String(err);
    }
    countWebhookDelivery(error === null ? 'delivered' : 'failed');
    if (error === null) {
      await em.execute(
        `update autonomous_runs set webhook_status = 'delivered', webhook_delivered_at = now(),
           webhook_next_at = null, webhook_last_error = null where run_id = ?`,
        [runId],
      );
    } else if (attempt >= this.opts.maxAttempts) {
      await em.execute(
        `update autonomous_runs set webhook_status = 'failed', webhook_next_at = null, webhook_last_error = ?
         where run_id = ?`,
        [error.slice(0, 1000), runId],
      );
      this.deps.log.warn({ runId, attempt, error }, 'run webhook failed permanently');
    } else {
      await em.execute(
        `update autonomous_runs set webhook_next_at = now() + ?::interval, webhook_last_error = ?
         where run_id = ?`,
        [`${backoffDelay(this.opts, attempt)} milliseconds`, error.slice(0, 1000), runId],
      );
    }
    return true;
  }
}
