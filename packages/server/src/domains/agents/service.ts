import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { apiKeyPrincipal, type Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { appError } from '../../errors/index.js';
import { insufficientCredits } from '../../metering/credits.js';
import { rateLimitHeaders } from '../../metering/rate-limit.js';
import type { Metering } from '../../metering/types.js';
import type { LlmMessage, ModelCatalog } from '../../providers/llm.js';
import {
  isTransientConflict,
  isUniqueViolation,
  type RunRecord,
  runStore,
  toolCallStore,
} from '../../runs/index.js';
import { catalogService } from '../catalogs/service.js';
import { connectedServers } from '../tool-servers/service.js';
import { assertToolApprovalNames } from './approval-config.js';
import { deepMerge, effectiveConfig, isUuid } from './config.js';
import { assertOutboundUrlAccepted, parseAllowlist } from './outbound.js';
import { type AgentConfigInput, type CONCURRENCY_POLICIES, isMcpServerRef } from './schema.js';
import { sessionTimeline } from './timeline.js';
import { turnAdmission } from './turn-admission.js';
import { type AdmittedHold, prepareTurnHold } from './turn-hold.js';
import { callbackSecret } from './webhook-signature.js';

type Row = Record<string, unknown>;
const iso = (v: unknown) => (v == null ? null : (v instanceof Date ? v : new Date(String(v))).toISOString());
const json = <T>(v: unknown): T => v as T;

/** Model provider and metering, wired by the metering work; optional until they are. */
export type AgentDeps = ServerDeps & {
  models?: ModelCatalog;
  metering?: Metering;
};

export interface ToolBinding {
  toolId: string;
  enabled: boolean;
}
export interface IntegrationBinding {
  packId: string;
  workspaceIntegrationId: string;
  enabledSkillIds?: string[];
  enabled: boolean;
}

export interface AgentRow {
  id: string;
  workspaceId: string;
  name: string;
  description: string | null;
  businessUseCase: string | null;
  prompt: string | null;
  modelId: string | null;
  config: Record<string, unknown>;
  status: 'active' | 'draft';
  isPublic: boolean;
  tools: ToolBinding[];
  integrationBindings: IntegrationBinding[];
  createdAt: string;
  updatedAt: string;
}

/** Maps an `apps` row of type `agent`; also used by the turn runtime. */
export const toAgent = (r: Row): AgentRow => ({
  id: r.id as string,
  workspaceId: r.workspace_id as string,
  name: r.name as string,
  description: (r.description as string) ?? null,
  businessUseCase: (r.business_use_case as string) ?? null,
  prompt: (r.system_prompt as string) ?? null,
  modelId: (r.model_id as string) ?? null,
  config: json<Record<string, unknown>>(r.config) ?? {},
  status: r.status as 'active' | 'draft',
  isPublic: Boolean(r.is_public),
  tools: json<ToolBinding[]>(r.tool_bindings) ?? [],
  integrationBindings: json<IntegrationBinding[]>(r.integration_bindings) ?? [],
  createdAt: iso(r.created_at) as string,
  updatedAt: iso(r.updated_at) as string,
});

const toSession = (r: Row) => ({
  id: r.id as string,
  title: (r.title as string) ?? null,
  mount: (r.mount as string) ?? null,
  app_id: r.app_id as string,
  last_message_at: iso(r.last_message_at),
  created_at: iso(r.created_at) as string,
  context: {
    app_id: r.app_id as string,
    origin: { source: r.origin_source as string },
    kind: r.kind as 'chat' | 'deliverable_job',
    end_user_id: (r.end_user_id as string) ?? null,
  },
  metadata: json<Record<string, unknown>>(r.metadata) ?? {},
});
export type SessionDto = ReturnType<typeof toSession>;

/**
 * Agents (rows of `apps` with app_type 'agent'), their sessions, and the integrator-facing
 * operations on turns. Every statement is filtered by the principal's workspace.
 */
export class AgentsService {
  constructor(
    private readonly em: EntityManager,
    private readonly deps: AgentDeps,
    private readonly principal: Principal,
  ) {}

  private get ws() {
    return this.principal.workspaceId;
  }

  // ---- agents -------------------------------------------------------------------------

  async listAgents() {
    const rows = await this.em.execute<Row[]>(
      `select * from apps where workspace_id = ? and app_type = 'agent' order by created_at, id`,
      [this.ws],
    );
    return rows.map(toAgent).map((a) => ({
      id: a.id,
      name: a.name,
      description: a.description,
      businessUseCase: a.businessUseCase,
      appType: 'agent' as const,
      isPublic: a.isPublic,
      status: a.status,
      createdAt: a.createdAt,
      updatedAt: a.updatedAt,
    }));
  }

  /**
   * The URLs a config makes the service call (MCP servers, custom-tool callbacks) must pass the
   * outbound guard now: a refused one would otherwise be stored and silently skipped at every
   * turn. Hosts that do not resolve yet are accepted; the turn reports them.
   */
  private async assertConfigUrls(config: AgentConfigInput | undefined) {
    const policy = parseAllowlist(this.deps.config.env.OUTBOUND_ALLOWLIST);
    const check = (url: string, field: string) =>
      assertOutboundUrlAccepted(url, policy, `config.${field}`, { unresolvable: 'accept' });
    const items = config?.capabilities?.mcp_servers ?? [];
    const refs = items.filter(isMcpServerRef).map((s) => s.toolServerId);
    const connected = await connectedServers(
      this.em,
      this.ws,
      this.deps.config.signingSecret as string,
      refs,
    );
    for (const [i, s] of items.entries()) {
      if (isMcpServerRef(s)) {
        if (!connected.has(s.toolServerId)) {
          const field = `config.capabilities.mcp_servers.${i}.toolServerId`;
          throw appError('AGENT_TOOL_SERVER_UNKNOWN', {
            field,
            details: {
              field,
            },
          });
        }
      } else await check(s.url, `capabilities.mcp_servers.${i}.url`);
    }
    for (const [i, t] of (config?.customTools ?? []).entries()) {
      if (t.callbackUrl) await check(t.callbackUrl, `customTools.${i}.callbackUrl`);
    }
  }

  async createAgent(input: {
    name: string;
    businessUseCase?: string;
    description?: string;
    prompt?: string;
    config?: AgentConfigInput;
    llm?: { componentId: string };
  }) {
    if (input.llm?.componentId && this.deps.models) this.deps.models.resolve('chat', input.llm.componentId);
    await this.assertConfigUrls(input.config);
    await assertToolApprovalNames(this.em, this.ws, this.deps.config.signingSecret as string, input.config);
    const id = randomUUID();
    const rows = await this.em.execute<Row[]>(
      `insert into apps (id, workspace_id, app_type, name, description, business_use_case, system_prompt,
         model_id, config)
       values (?, ?, 'agent', ?, ?, ?, ?, ?, ?::jsonb) returning *`,
      [
        id,
        this.ws,
        input.name,
        input.description ?? null,
        input.businessUseCase ?? 'Managed agent',
        input.prompt ?? null,
        input.llm?.componentId ?? null,
        JSON.stringify(input.config ?? {}),
      ],
    );
    const a = toAgent(rows[0] as Row);
    return { id: a.id, name: a.name, appType: 'agent' as const, createdAt: a.createdAt };
  }

  async requireAgent(agentId: string): Promise<AgentRow> {
    if (!isUuid(agentId)) throw appError('AGENT_NOT_FOUND');
    const rows = await this.em.execute<Row[]>(
      `select * from apps where id = ? and workspace_id = ? and app_type = 'agent'`,
      [agentId, this.ws],
    );
    if (!rows[0]) throw appError('AGENT_NOT_FOUND');
    return toAgent(rows[0]);
  }

  detail(a: AgentRow) {
    const config = effectiveConfig(a.config);
    return {
      id: a.id,
      name: a.name,
      description: a.description,
      businessUseCase: a.businessUseCase,
      prompt: a.prompt,
      mode: config.runtimeMode,
      modelId: a.modelId ?? this.deps.models?.defaultId('chat') ?? '',
      status: a.status,
      isPublic: a.isPublic,
      config: config as Record<string, unknown>,
      tools: a.tools,
      integrationBindings: a.integrationBindings,
      callbackSecret: callbackSecret(this.deps.config.signingSecret as string, a.id),
      createdAt: a.createdAt,
      updatedAt: a.updatedAt,
    };
  }

  async getAgent(agentId: string) {
    return this.detail(await this.requireAgent(agentId));
  }

  async updateAgent(
    agentId: string,
    patch: {
      name?: string;
      description?: string;
      businessUseCase?: string;
      prompt?: string;
      isPublic?: boolean;
      config?: AgentConfigInput;
      tools?: ToolBinding[];
      integrationBindings?: IntegrationBinding[];
    },
  ) {
    for (const b of patch.integrationBindings ?? []) {
      const pack = catalogService.findPack(b.packId);
      if (!pack) throw appError('UNKNOWN_INTEGRATION_PACK', { packId: b.packId });
      for (const s of b.enabledSkillIds ?? []) {
        if (!pack.skills.some((k) => k.skillId === s)) {
          throw appError('UNKNOWN_SKILL', { s, packId: b.packId });
        }
      }
    }
    for (const t of patch.tools ?? []) {
      if (!knownToolId(t.toolId)) throw appError('INVALID_TOOL_BINDING', { toolId: t.toolId });
    }
    await this.assertConfigUrls(patch.config);
    return this.em.transactional(async (tx) => {
      const rows = await tx.execute<Row[]>(
        `select * from apps where id = ? and workspace_id = ? and app_type = 'agent' for update`,
        [isUuid(agentId) ? agentId : randomUUID(), this.ws],
      );
      if (!rows[0]) throw appError('AGENT_NOT_FOUND');
      const current = toAgent(rows[0]);
      const sets: string[] = [];
      const params: unknown[] = [];
      const set = (col: string, v: unknown, cast = '') => {
        sets.push(`${col} = ?${cast}`);
        params.push(v);
      };
      if (patch.name !== undefined) set('name', patch.name);
      if (patch.description !== undefined) set('description', patch.description);
      if (patch.businessUseCase !== undefined) set('business_use_case', patch.businessUseCase);
      if (patch.prompt !== undefined) set('system_prompt', patch.prompt);
      if (patch.isPublic !== undefined) set('is_public', patch.isPublic);
      if (patch.config !== undefined) {
        const merged = deepMerge(current.config, patch.config);
        await assertToolApprovalNames(tx, this.ws, this.deps.config.signingSecret as string, merged);
        set('config', JSON.stringify(merged), '::jsonb');
      }
      if (patch.tools !== undefined) set('tool_bindings', JSON.stringify(patch.tools), '::jsonb');
      if (patch.integrationBindings !== undefined) {
        set('integration_bindings', JSON.stringify(patch.integrationBindings), '::jsonb');
      }
      if (sets.length === 0) return this.detail(current);
      const updated = await tx.execute<Row[]>(
        `update apps set ${sets.join(', ')}, updated_at = now() where id = ? returning *`,
        [...params, current.id],
      );
      return this.detail(toAgent(updated[0] as Row));
    });
  }

  async deleteAgent(agentId: string) {
    const a = await this.requireAgent(agentId);
    await this.em.transactional(async (tx) => {
      await tx.execute(
        `update runs set status = 'cancelled', completed_at = now(), lease_owner = null, waiting = false
         where app_id = ? and status in ('pending', 'running')`,
        [a.id],
      );
      await tx.execute('delete from apps where id = ? and workspace_id = ?', [a.id, this.ws]);
    });
    return { deleted: true as const };
  }

  // ---- sessions -----------------------------------------------------------------------

  async createSession(
    agentId: string,
    input: { metadata?: Record<string, unknown>; end_user_id?: string; title?: string },
  ) {
    const agent = await this.requireAgent(agentId);
    if (this.deps.metering) {
      Object.assign(this.rateHeaders, await this.deps.metering.rateLimit(this.ws, 'session_create'));
    }
    const id = randomUUID();
    const rows = await this.em.execute<Row[]>(
      `insert into agent_sessions (id, workspace_id, app_id, title, mount, metadata, end_user_id, origin_source)
       values (?, ?, ?, ?, ?, ?::jsonb, ?, 'api') returning *`,
      [
        id,
        this.ws,
        agent.id,
        input.title ?? null,
        `/agents/${agent.id}/sessions/${id}`,
        JSON.stringify(input.metadata ?? {}),
        input.end_user_id ?? null,
      ],
    );
    const s = toSession(rows[0] as Row);
    return { id: s.id, mount: s.mount, created_at: s.created_at };
  }

  /** Rate-limit headers to put on the response (set by calls that take from a bucket). */
  readonly rateHeaders: Record<string, string> = {};

  async listSessions(agentId: string, limit: number, offset: number) {
    const agent = await this.requireAgent(agentId);
    const rows = await this.em.execute<Row[]>(
      `select *, count(*) over () as total from agent_sessions where workspace_id = ? and app_id = ?
       order by created_at desc, id limit ? offset ?`,
      [this.ws, agent.id, limit, offset],
    );
    let total = rows[0] ? Number(rows[0].total) : 0;
    if (!rows[0] && offset > 0) {
      const c = await this.em.execute<Row[]>(
        'select count(*) as n from agent_sessions where workspace_id = ? and app_id = ?',
        [this.ws, agent.id],
      );
      total = Number(c[0]?.n ?? 0);
    }
    return { sessions: rows.map(toSession), total };
  }

  async requireSession(sessionId: string): Promise<SessionDto> {
    if (!isUuid(sessionId)) throw appError('SESSION_NOT_FOUND');
    const rows = await this.em.execute<Row[]>(
      'select * from agent_sessions where id = ? and workspace_id = ?',
      [sessionId, this.ws],
    );
    if (!rows[0]) throw appError('SESSION_NOT_FOUND');
    return toSession(rows[0]);
  }

  async deleteSession(sessionId: string) {
    const s = await this.requireSession(sessionId);
    await this.em.transactional(async (tx) => {
      await tx.execute(
        `update runs set status = 'cancelled', completed_at = now(), lease_owner = null, waiting = false
         where session_id = ? and status in ('pending', 'running')`,
        [s.id],
      );
      await tx.execute('delete from agent_sessions where id = ? and workspace_id = ?', [s.id, this.ws]);
    });
    return { deleted: true as const };
  }

  /** The session timeline: messages and turn runs, ascending by created_at. */
  async sessionEvents(sessionId: string) {
    return sessionTimeline(this.em, (await this.requireSession(sessionId)).id);
  }

  // ---- turns --------------------------------------------------------------------------

  /**
   * Starts a turn: validates credits and the concurrency policy, stores the user message
   * and creates the run. The caller streams the run.
   */
  async startTurn(
    sessionId: string,
    input: {
      message: string;
      model?: string;
      concurrency: (typeof CONCURRENCY_POLICIES)[number];
      /**
       * Earlier messages the turn's model call sees before `message` (after the agent's prompt
       * and its memory): the OpenAI-compatible surface seeds a new session with a request's
       * conversation this way.
       */
      history?: LlmMessage[];
    },
    ctx: { requestId: string },
  ): Promise<RunRecord> {
    if (input.concurrency === 'interrupt') return this.startInterruptingTurn(sessionId, input, ctx);
    if (!isUuid(sessionId)) throw appError('SESSION_NOT_FOUND');
    if (this.deps.metering) {
      Object.assign(this.rateHeaders, await this.deps.metering.rateLimit(this.ws, 'agent_message'));
      await this.deps.metering.assertCredits(this.ws);
    }
    if (input.model && this.deps.models) this.deps.models.resolve('chat', input.model);
    const runInput = {
      message: input.message,
      model: input.model ?? null,
      apiKeyId: this.principal.keyId ?? null,
      requestId: ctx.requestId,
      ...(input.history?.length ? { history: input.history } : {}),
    };
    // Session lookup, the concurrency check, the user message, the run and (with a free turn
    // slot here) its lease: one statement. A concurrent admission that started a turn of the
    // same session first makes ours fail on the unique index: look again.
    for (let attempt = 0; ; attempt++) {
      try {
        const admitted = await turnAdmission.admitTurn(this.em, {
          runId: randomUUID(),
          messageId: randomUUID(),
          workspaceId: this.ws,
          sessionId,
          message: input.message,
          input: runInput,
          reject: input.concurrency === 'reject',
          claimFor: this.deps.runs.claimSlot('turn'),
        });
        if (admitted.missing) throw appError('SESSION_NOT_FOUND');
        if (!admitted.run) {
          throw appError('TURN_IN_PROGRESS', {
            details: {
              runId: admitted.activeRunId as string,
            },
          });
        }
        if (admitted.run.status === 'running') {
          this.deps.runs.startClaimed(admitted.run, { agent: admitted.agent });
        } else {
          await this.deps.runs.bus.publish({ t: 'wake' });
        }
        return admitted.run;
      } catch (err) {
        if (attempt < 3 && isUniqueViolation(err)) continue;
        throw err;
      }
    }
  }

  /**
   * `startTurn` for an API-key caller in ONE statement on the plain pool (decision 0029):
   * key, rate limit, credit check and admission (`turnAdmission.admitKeyTurn`). Only for a request
   * the route found valid (body, session id, model override) and not `interrupt`; the errors
   * come in `startTurn`'s order: 401, 429, 402, 404, 409.
   */
  static async startKeyTurn(
    deps: AgentDeps & { metering: Metering },
    keyHash: string,
    sessionId: string,
    input: { message: string; model?: string; concurrency: (typeof CONCURRENCY_POLICIES)[number] },
    ctx: { requestId: string },
    onPrincipal?: (principal: Principal) => void,
  ): Promise<{ run: RunRecord; headers: Record<string, string> }> {
    const rule = deps.metering.settings.rateLimits.agent_message;
    const limited = !!rule && rule.limit > 0;
    for (let attempt = 0; ; attempt++) {
      const runId = randomUUID();
      const claimFor = deps.runs.claimSlot('turn');
      const hold = claimFor ? prepareTurnHold(deps, sessionId, runId, input, ctx.requestId) : undefined;
      try {
        const admitted = await turnAdmission.admitKeyTurn(deps.db.sql, {
          keyHash,
          admit: true,
          rate: { limited, limit: rule?.limit ?? 0, windowSeconds: rule?.windowSeconds ?? 60 },
          runId,
          messageId: randomUUID(),
          sessionId,
          message: input.message,
          input: { message: input.message, model: input.model ?? null, requestId: ctx.requestId },
          reject: input.concurrency === 'reject',
          claimFor,
          hold: hold?.statement,
        });
        if (!admitted) throw appError('INVALID_API_KEY');
        onPrincipal?.(apiKeyPrincipal(admitted.key));
        const headers =
          limited && rule
            ? rateLimitHeaders(rule, Number(admitted.hits), Number(admitted.resetIn), 'agent_message')
            : {};
        if (admitted.balanceMicros <= 0) throw insufficientCredits();
        if (admitted.missing) throw appError('SESSION_NOT_FOUND');
        if (!admitted.run) {
          throw appError('TURN_IN_PROGRESS', {
            details: {
              runId: admitted.activeRunId as string,
            },
          });
        }
        if (admitted.run.status === 'running') {
          const local: { agent: unknown; hold?: AdmittedHold } = { agent: admitted.agent };
          if (admitted.held && hold) local.hold = hold.adopt(admitted.key, admitted.held);
          deps.runs.startClaimed(admitted.run, local);
        } else {
          await deps.runs.bus.publish({ t: 'wake' });
        }
        return { run: admitted.run, headers };
      } catch (err) {
        // A run id taken meanwhile, or a deadlock victim (nothing was written): admit again.
        if (attempt < 3 && (isUniqueViolation(err) || isTransientConflict(err))) continue;
        throw err;
      }
    }
  }

  /** `interrupt`: cancel the session's live turns, then start this one. */
  private async startInterruptingTurn(
    sessionId: string,
    input: { message: string; model?: string },
    ctx: { requestId: string },
  ): Promise<RunRecord> {
    const session = await this.requireSession(sessionId);
    if (this.deps.metering) {
      Object.assign(this.rateHeaders, await this.deps.metering.rateLimit(this.ws, 'agent_message'));
      await this.deps.metering.assertCredits(this.ws);
    }
    if (input.model && this.deps.models) this.deps.models.resolve('chat', input.model);
    const active = await this.em.execute<Row[]>(
      `select * from runs where session_id = ? and kind = 'turn' and status in ('pending', 'running')
       order by created_at`,
      [session.id],
    );
    // Queued turns first: cancelling the running one first would let the next queued turn start.
    active.sort((a, b) => (a.status === b.status ? 0 : a.status === 'pending' ? -1 : 1));
    for (const r of active) {
      if (r.status === 'pending') {
        const ended = await runStore.finish(this.em, r.id as string, null, 'cancelled', {}).catch(() => null);
        if (ended) {
          await this.deps.runs.bus.publish({ t: 'event', runId: ended.runId, seq: ended.seq });
          continue;
        }
        // Claimed meanwhile: cancel it as a running run.
      }
      const run = await runStore.getRun(this.em, r.id as string);
      if (run?.status === 'running') await this.deps.runs.cancel(this.em, run).catch(() => undefined);
    }
    const runId = randomUUID();
    const run = await this.em.transactional(async (tx) => {
      await tx.execute(
        `insert into session_messages (id, workspace_id, session_id, run_id, role, content, metadata)
         values (?, ?, ?, ?, 'user', ?, '{}'::jsonb)`,
        [randomUUID(), this.ws, session.id, runId, input.message],
      );
      await tx.execute('update agent_sessions set last_message_at = now() where id = ?', [session.id]);
      return runStore.insertRun(tx, {
        id: runId,
        workspaceId: this.ws,
        kind: 'turn',
        appId: session.app_id,
        sessionId: session.id,
        serialKey: `session:${session.id}`,
        input: {
          message: input.message,
          model: input.model ?? null,
          apiKeyId: this.principal.keyId ?? null,
          requestId: ctx.requestId,
        },
      });
    });
    await this.deps.runs.bus.publish({ t: 'wake' });
    return run;
  }

  /** A run of this session (for the reconnect stream). */
  async requireSessionRun(sessionId: string, runId: string): Promise<RunRecord> {
    const s = await this.requireSession(sessionId);
    const run = isUuid(runId) ? await runStore.getRun(this.em, runId) : null;
    if (!run || run.sessionId !== s.id || run.workspaceId !== this.ws) throw appError('RUN_NOT_FOUND');
    return run;
  }

  async submitToolResult(input: { sessionId: string; toolCallId: string; result?: unknown; error?: string }) {
    const session = await this.requireSession(input.sessionId);
    const call = await toolCallStore.getToolCall(this.em, input.toolCallId);
    if (!call || call.workspaceId !== this.ws || call.kind !== 'result') throw appError('UNKNOWN_TOOL_CALL');
    if (call.sessionId !== session.id) throw appError('TOOL_CALL_OTHER_SESSION');
    const settled = await this.deps.runs.settleToolCall(
      call.id,
      input.error !== undefined ? { error: input.error } : { result: input.result },
    );
    const final = settled ?? (await toolCallStore.getToolCall(this.em, call.id));
    return {
      accepted: settled !== null,
      sessionId: session.id,
      toolCallId: call.id,
      status: (final?.status === 'pending' ? 'failed' : final?.status) as 'completed' | 'failed' | 'expired',
    };
  }

  async cancelRun(sessionId: string, runId: string) {
    const session = await this.requireSession(sessionId);
    const run = isUuid(runId) ? await runStore.getRun(this.em, runId) : null;
    if (!run || run.workspaceId !== this.ws || run.sessionId !== session.id) {
      throw appError('RUN_NOT_FOUND');
    }
    if (run.status !== 'running') throw appError('RUN_NOT_ACTIVE', { status: run.status });
    await this.deps.runs.cancel(this.em, run);
    return { runId: run.id, status: 'cancelled' as const };
  }
}

function knownToolId(toolId: string): boolean {
  if (catalogService.platformToolDefinitions().some((t) => t.toolId === toolId)) return true;
  return catalogService
    .listPacks()
    .some((p) => catalogService.getPack(p.id).tools.some((t) => t.toolId === toolId));
}
