import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { appError } from '../../errors/index.js';
import { effectiveConfig, isUuid } from '../agents/config.js';
import { assertOutboundUrlAccepted, parseAllowlist } from '../agents/outbound.js';
import { AgentsService } from '../agents/service.js';
import { assertValidSchedule, cronIntervalSeconds, minIntervalSeconds, nextTick, nextTicks } from './cron.js';
import { recordTick, type ScheduleRow, toScheduleRow, writeScheduledRun } from './fire.js';
import { type CreateScheduleBody, MAX_SCHEDULES_PER_AGENT, type UpdateScheduleBody } from './schema.js';

type Row = Record<string, unknown>;

const iso = (d: Date | null) => (d ? d.toISOString() : null);

export const toScheduleDto = (s: ScheduleRow) => ({
  id: s.id,
  agentId: s.app_id,
  cron: s.cron,
  timezone: s.timezone,
  task: s.task,
  enabled: s.enabled,
  overlap: s.overlap,
  metadata: s.metadata,
  nextRunAt: iso(s.next_run_at),
  lastRunAt: iso(s.last_run_at),
  createdAt: s.created_at.toISOString(),
  updatedAt: s.updated_at.toISOString(),
});

/**
 * Schedules of an agent (docs/agents.md, "Schedules"): each starts an autonomous run at every
 * tick of its cron expression (the ticker, ticker.ts) or on demand ("run now"). Every
 * statement is filtered by the principal's workspace; another workspace's agent or schedule
 * is a 404.
 */
export class SchedulesService {
  private readonly agents: AgentsService;

  constructor(
    private readonly em: EntityManager,
    private readonly deps: ServerDeps,
    private readonly principal: Principal,
  ) {
    this.agents = new AgentsService(em, deps, principal);
  }

  private get ws() {
    return this.principal.workspaceId;
  }

  private get minSeconds() {
    return minIntervalSeconds(this.deps.config.env);
  }

  private async requireDeliverables(agentId: string) {
    const agent = await this.agents.requireAgent(agentId);
    if (!effectiveConfig(agent.config).capabilities.deliverables.enabled) {
      throw appError('DELIVERABLES_DISABLED', {
        details: {
          configField: 'capabilities.deliverables.enabled',
          enableWith: { config: { capabilities: { deliverables: { enabled: true } } } },
        },
      });
    }
    return agent;
  }

  private async assertWebhook(metadata: Record<string, string> | undefined) {
    const url = metadata?.webhookUrl;
    if (url === undefined) return;
    if (!/^https?:\/\//i.test(url) || !URL.canParse(url)) {
      throw appError('SCHEDULE_WEBHOOK_URL_NOT_HTTP');
    }
    const policy = parseAllowlist(this.deps.config.env.OUTBOUND_ALLOWLIST);
    await assertOutboundUrlAccepted(url, policy, 'metadata.webhookUrl', { unresolvable: 'refuse' });
  }

  async create(agentId: string, body: CreateScheduleBody) {
    const agent = await this.requireDeliverables(agentId);
    assertValidSchedule(body.cron, body.timezone, this.minSeconds);
    await this.assertWebhook(body.metadata);
    const id = randomUUID();
    const next = body.enabled ? nextTick(body.cron, body.timezone, new Date()) : null;
    const row = await this.em.transactional(async (tx) => {
      // The agent row is locked so concurrent creates count one after another.
      await tx.execute('select id from apps where id = ? for update', [agent.id]);
      const count = await tx.execute<Row[]>(
        'select count(*) as n from agent_schedules where workspace_id = ? and app_id = ?',
        [this.ws, agent.id],
      );
      if (Number(count[0]?.n ?? 0) >= MAX_SCHEDULES_PER_AGENT) {
        throw appError('SCHEDULE_LIMIT_REACHED', {
          max: MAX_SCHEDULES_PER_AGENT,
          details: { max: MAX_SCHEDULES_PER_AGENT },
        });
      }
      const rows = await tx.execute<Row[]>(
        `insert into agent_schedules (id, workspace_id, app_id, cron, timezone, task, enabled, overlap, metadata, next_run_at)
         values (?, ?, ?, ?, ?, ?, ?, ?, ?::jsonb, ?) returning *`,
        [
          id,
          this.ws,
          agent.id,
          body.cron,
          body.timezone,
          body.task,
          body.enabled,
          body.overlap,
          JSON.stringify(body.metadata ?? {}),
          next,
        ],
      );
      return toScheduleRow(rows[0] as Row);
    });
    return toScheduleDto(row);
  }

  async list(agentId: string) {
    const agent = await this.agents.requireAgent(agentId);
    const rows = await this.em.execute<Row[]>(
      `select * from agent_schedules where workspace_id = ? and app_id = ? order by created_at, id`,
      [this.ws, agent.id],
    );
    return rows.map((r) => toScheduleDto(toScheduleRow(r)));
  }

  async requireSchedule(agentId: string, scheduleId: string): Promise<ScheduleRow> {
    const agent = await this.agents.requireAgent(agentId);
    if (!isUuid(scheduleId)) throw appError('SCHEDULE_NOT_FOUND');
    const rows = await this.em.execute<Row[]>(
      'select * from agent_schedules where id = ? and workspace_id = ? and app_id = ?',
      [scheduleId, this.ws, agent.id],
    );
    if (!rows[0]) throw appError('SCHEDULE_NOT_FOUND');
    return toScheduleRow(rows[0]);
  }

  async get(agentId: string, scheduleId: string) {
    return toScheduleDto(await this.requireSchedule(agentId, scheduleId));
  }

  /**
   * Changes the sent fields. A new cron or zone, or resuming (`enabled: true` on a paused
   * schedule), sets the next tick from now; pausing clears it.
   */
  async update(agentId: string, scheduleId: string, patch: UpdateScheduleBody) {
    const current = await this.requireSchedule(agentId, scheduleId);
    const cron = patch.cron ?? current.cron;
    const timezone = patch.timezone ?? current.timezone;
    const enabled = patch.enabled ?? current.enabled;
    if (enabled) await this.requireDeliverables(agentId);
    const timing = patch.cron !== undefined || patch.timezone !== undefined;
    if (timing) assertValidSchedule(cron, timezone, this.minSeconds);
    await this.assertWebhook(patch.metadata);
    const resumed = enabled && !current.enabled;
    const recompute = !enabled || timing || resumed;
    const next = enabled ? nextTick(cron, timezone, new Date()) : null;
    const rows = await this.em.execute<Row[]>(
      `update agent_schedules set cron = ?, timezone = ?, task = ?, enabled = ?, overlap = ?,
         metadata = ?::jsonb, next_run_at = case when ? then ?::timestamptz else next_run_at end,
         updated_at = now()
       where id = ? and workspace_id = ? returning *`,
      [
        cron,
        timezone,
        patch.task ?? current.task,
        enabled,
        patch.overlap ?? current.overlap,
        JSON.stringify(patch.metadata ?? current.metadata),
        recompute,
        next,
        current.id,
        this.ws,
      ],
    );
    if (!rows[0]) throw appError('SCHEDULE_NOT_FOUND');
    return toScheduleDto(toScheduleRow(rows[0]));
  }

  async delete(agentId: string, scheduleId: string) {
    const s = await this.requireSchedule(agentId, scheduleId);
    await this.em.execute('delete from agent_schedules where id = ? and workspace_id = ?', [s.id, this.ws]);
    return { deleted: true as const };
  }

  /**
   * "Run now": one run of the schedule's task, whatever its cron, paused or not (recorded in
   * its history as `manual`). Refused like any run: 400 without deliverables, 402 without
   * credits.
   */
  async runNow(agentId: string, scheduleId: string, ctx: { requestId: string }) {
    const s = await this.requireSchedule(agentId, scheduleId);
    await this.requireDeliverables(agentId);
    await this.deps.metering?.assertCredits(this.ws);
    const created = await this.em.transactional(async (tx) => {
      const now = new Date();
      const run = await writeScheduledRun(
        tx,
        this.deps,
        s,
        { trigger: 'manual', tickAt: now, apiKeyId: this.principal.keyId ?? null, requestId: ctx.requestId },
        null,
      );
      if (!run) throw new Error('a manual schedule run has no idempotency key to collide on');
      await recordTick(tx, {
        scheduleId: s.id,
        workspaceId: this.ws,
        tickAt: now,
        trigger: 'manual',
        status: 'started',
        runId: run.runId,
        reason: null,
      });
      await tx.execute('update agent_schedules set last_run_at = ?, last_run_id = ? where id = ?', [
        now,
        run.runId,
        s.id,
      ]);
      return run;
    });
    await this.deps.runs.bus.publish({ t: 'wake' });
    return {
      runId: created.runId,
      sessionId: created.sessionId,
      created_at: created.createdAt.toISOString(),
    };
  }

  /** The schedule's history, newest first: every tick fired (started, skipped, failed) and every run now. */
  async ticks(agentId: string, scheduleId: string, limit: number) {
    const s = await this.requireSchedule(agentId, scheduleId);
    const rows = await this.em.execute<Row[]>(
      `select * from schedule_ticks where schedule_id = ? and workspace_id = ?
       order by created_at desc, id desc limit ?`,
      [s.id, this.ws, limit],
    );
    return rows.map((r) => ({
      id: r.id as string,
      tickAt: new Date(r.tick_at as string).toISOString(),
      trigger: r.trigger as 'schedule' | 'manual',
      status: r.status as 'started' | 'skipped' | 'failed',
      runId: (r.run_id as string | null) ?? null,
      reason: (r.reason as string | null) ?? null,
      createdAt: new Date(r.created_at as string).toISOString(),
    }));
  }
}

/** The next firings of an expression, checked as a schedule's would be. */
export function previewSchedule(deps: ServerDeps, input: { cron: string; timezone: string; count: number }) {
  assertValidSchedule(input.cron, input.timezone, minIntervalSeconds(deps.config.env));
  return {
    times: nextTicks(input.cron, input.timezone, new Date(), input.count).map((d) => d.toISOString()),
    intervalSeconds: cronIntervalSeconds(input.cron, input.timezone),
  };
}
