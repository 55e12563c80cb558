import { randomUUID } from 'node:crypto';
import { apiKeyPrincipal, type Principal } from '../../auth/principal.js';
import { appError } from '../../errors/index.js';
import { insufficientCredits } from '../../metering/credits.js';
import { rateLimitHeaders } from '../../metering/rate-limit.js';
import type { Metering } from '../../metering/types.js';
import type { LlmMessage } from '../../providers/llm.js';
import {
  isTransientConflict,
  isUniqueViolation,
  type RunRecord,
  runStore,
  toolCallStore,
} from '../../runs/index.js';
import { isUuid } from './config.js';
import type { CONCURRENCY_POLICIES } from './schema.js';
import { type AgentDeps, AgentsService } from './service.js';
import { turnAdmission } from './turn-admission.js';
import { type AdmittedHold, prepareTurnHold } from './turn-hold.js';

type Row = Record<string, unknown>;

/**
 * The integrator-facing operations on turns: starting one (the one-statement admissions),
 * reading, cancelling and answering its runs' tool calls. Every statement is filtered by the
 * principal's workspace; agents and sessions are `AgentsService`'s.
 */
export class AgentTurns extends AgentsService {
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
