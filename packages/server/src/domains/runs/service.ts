import type { EntityManager } from '@mikro-orm/postgresql';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { appError } from '../../errors/index.js';
import { TERMINAL_EVENT_TYPES } from '../../runs/index.js';
import { effectiveConfig, isUuid } from '../agents/config.js';
import { assertOutboundUrlAccepted, parseAllowlist } from '../agents/outbound.js';
import { AgentsService } from '../agents/service.js';
import { insertAutonomousRun } from './create.js';
import { isMessagingSource } from './schema.js';

type Row = Record<string, unknown>;
const iso = (v: unknown) => (v == null ? null : (v instanceof Date ? v : new Date(String(v))).toISOString());
const json = <T>(v: unknown): T => (typeof v === 'string' ? JSON.parse(v) : v) as T;

/** Event types left out of the get-run `events[]` (they are on the live stream). */
const STREAM_ONLY_EVENTS = ['message.delta'];
const MAX_DETAIL_EVENTS = 1000;

export interface CreateRunBody {
  task: string;
  sessionId?: string;
  metadata?: {
    source?: string;
    containerId?: string;
    threadId?: string;
    externalWorkspaceId?: string;
    messageId?: string;
    webhookUrl?: string;
  };
  webhookUrl?: string;
}

const toRunDto = (r: Row) => ({
  id: r.id as string,
  status: r.status as 'pending' | 'running' | 'completed' | 'failed' | 'cancelled',
  task: r.task as string,
  session_id: r.session_id as string,
  created_at: iso(r.created_at) as string,
  started_at: iso(r.started_at),
  completed_at: iso(r.completed_at),
  error: (r.error as string) ?? null,
  metadata: json<Record<string, unknown>>(r.metadata) ?? {},
});
export type RunDto = ReturnType<typeof toRunDto>;

const intEnv = (v: string | undefined, d: number) => {
  const n = v === undefined || v.trim() === '' ? Number.NaN : Number(v);
  return Number.isFinite(n) && n >= 0 ? n : d;
};

/**
 * Autonomous runs of an agent (spec 4.5): creation with idempotency on `metadata.messageId`,
 * listing and the run detail. Execution is the `autonomous` executor (executor.ts).
 * Every statement is filtered by the principal's workspace.
 */
export class RunsService {
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

  async create(agentId: string, body: CreateRunBody, ctx: { requestId: string }) {
    const agent = await this.agents.requireAgent(agentId);
    const config = effectiveConfig(agent.config);
    if (!config.capabilities.deliverables.enabled) {
      throw appError('DELIVERABLES_DISABLED', {
        details: {
          configField: 'capabilities.deliverables.enabled',
          enableWith: { config: { capabilities: { deliverables: { enabled: true } } } },
        },
      });
    }
    const meta = body.metadata ?? {};
    if (isMessagingSource(meta.source)) throw appError('INTEGRATION_MENTION');
    const messageId = meta.messageId;

    // Idempotency: a repeated key answers with the run it created, before any other check.
    if (messageId) {
      const existing = await this.findByMessageId(agent.id, messageId);
      if (existing) return existing;
    }

    const webhookUrl = body.webhookUrl ?? meta.webhookUrl ?? null;
    if (webhookUrl) await this.assertWebhookAllowed(webhookUrl);
    await this.deps.metering?.assertCredits(this.ws);

    let sessionId: string | undefined;
    if (body.sessionId !== undefined) {
      const s = await this.agents.requireSession(body.sessionId);
      if (s.app_id !== agent.id) throw appError('SESSION_NOT_FOUND');
      sessionId = s.id;
    }
    const { webhookUrl: _w, ...storedMeta } = meta;
    const created = await this.em.transactional((tx) =>
      insertAutonomousRun(tx, this.deps, {
        workspaceId: this.ws,
        agentId: agent.id,
        task: body.task,
        sessionId,
        metadata: storedMeta,
        messageId: messageId ?? null,
        webhookUrl,
        apiKeyId: this.principal.keyId ?? null,
        requestId: ctx.requestId,
      }),
    );
    if (!created) {
      const existing = await this.findByMessageId(agent.id, messageId as string);
      if (!existing) throw new Error('idempotency key claimed but run not found');
      return existing;
    }
    await this.deps.runs.bus.publish({ t: 'wake' });
    return {
      runId: created.runId,
      sessionId: created.sessionId,
      created_at: created.createdAt.toISOString(),
    };
  }

  private async findByMessageId(appId: string, messageId: string) {
    const rows = await this.em.execute<Row[]>(
      `select a.run_id, a.session_id, r.created_at from autonomous_runs a join runs r on r.id = a.run_id
       where a.workspace_id = ? and a.app_id = ? and a.message_id = ?`,
      [this.ws, appId, messageId],
    );
    const r = rows[0];
    return r
      ? {
          runId: r.run_id as string,
          sessionId: r.session_id as string,
          created_at: iso(r.created_at) as string,
        }
      : null;
  }

  private async assertWebhookAllowed(raw: string) {
    const policy = parseAllowlist(this.deps.config.env.OUTBOUND_ALLOWLIST);
    await assertOutboundUrlAccepted(raw, policy, 'webhookUrl', { unresolvable: 'refuse' });
  }

  /** Runs of the agent, newest first; `scheduleId` keeps those a schedule started. */
  async list(agentId: string, limit: number, offset = 0, scheduleId?: string) {
    const agent = await this.agents.requireAgent(agentId);
    const bySchedule = scheduleId === undefined ? '' : ' and a.schedule_id = ?';
    const params: unknown[] = [this.ws, agent.id];
    if (scheduleId !== undefined) params.push(scheduleId);
    const rows = await this.em.execute<Row[]>(
      `select r.*, a.task, a.metadata from autonomous_runs a join runs r on r.id = a.run_id
       where a.workspace_id = ? and a.app_id = ?${bySchedule}
       order by r.created_at desc, r.id desc limit ? offset ?`,
      [...params, limit, offset],
    );
    const count = await this.em.execute<Row[]>(
      `select count(*) as n from autonomous_runs a where a.workspace_id = ? and a.app_id = ?${bySchedule}`,
      params,
    );
    return { runs: rows.map(toRunDto), total: Number(count[0]?.n ?? 0) };
  }

  async requireRun(agentId: string, runId: string): Promise<RunDto & { waiting: boolean }> {
    const agent = await this.agents.requireAgent(agentId);
    if (!isUuid(runId)) throw appError('RUN_NOT_FOUND');
    const rows = await this.em.execute<Row[]>(
      `select r.*, a.task, a.metadata from autonomous_runs a join runs r on r.id = a.run_id
       where a.run_id = ? and a.workspace_id = ? and a.app_id = ?`,
      [runId, this.ws, agent.id],
    );
    if (!rows[0]) throw appError('RUN_NOT_FOUND');
    return { ...toRunDto(rows[0]), waiting: Boolean(rows[0].waiting) };
  }

  async get(agentId: string, runId: string) {
    const { waiting, ...run } = await this.requireRun(agentId, runId);
    const events = await this.em.execute<Row[]>(
      `select * from run_events where run_id = ? and type not in (${STREAM_ONLY_EVENTS.map(() => '?').join(', ')})
       order by seq limit ?`,
      [run.id, ...STREAM_ONLY_EVENTS, MAX_DETAIL_EVENTS],
    );
    // Past the cap, the terminal event is still shown.
    if (events.length === MAX_DETAIL_EVENTS && !['pending', 'running'].includes(run.status)) {
      const last = await this.em.execute<Row[]>(
        `select * from run_events where run_id = ? and type in (${TERMINAL_EVENT_TYPES.map(() => '?').join(', ')})`,
        [run.id, ...TERMINAL_EVENT_TYPES],
      );
      if (last[0] && !events.some((e) => e.seq === last[0]?.seq)) events.push(last[0]);
    }
    return {
      run,
      waiting,
      events: events.map((e) => ({
        id: String(e.seq),
        sequence_number: Number(e.seq),
        event_type: e.type as string,
        payload: json<Record<string, unknown>>(e.payload) ?? {},
        created_at: iso(e.created_at) as string,
      })),
      artifacts: await listArtifacts(this.em, run.id),
    };
  }
}

export async function listArtifacts(em: EntityManager, runId: string) {
  const rows = await em.execute<Row[]>(
    'select * from run_artifacts where run_id = ? order by created_at, id',
    [runId],
  );
  return rows.map((a) => ({
    id: a.id as string,
    file_id: a.file_id as string,
    filename: a.filename as string,
    mime_type: a.mime_type as string,
    size_bytes: Number(a.size_bytes),
    created_at: iso(a.created_at) as string,
  }));
}

/** How long a client should wait before polling a run again (ms); null once it has ended. */
export function pollHintMs(deps: ServerDeps, run: { status: string; waiting?: boolean }): number | null {
  if (run.status !== 'pending' && run.status !== 'running') return null;
  const base = intEnv(deps.config.env.RUN_POLL_HINT_MS, 2000);
  return run.waiting ? base * 2 : base;
}
