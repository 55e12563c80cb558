import { randomBytes, randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { ServerDeps } from '../../context.js';
import { AppError, appError } from '../../errors/index.js';
import { MeteredCall, metered } from '../../generation/metered-call.js';
import type { GenerationMeter, Metering } from '../../metering/types.js';
import type {
  LlmMessage,
  LlmProvider,
  ModelCatalog,
  ModelInfo,
  ToolCall,
  ToolDefinition,
} from '../../providers/llm.js';
import { estimateTokens, messageChars } from '../../providers/tokens.js';
import { webSearchProvidersFromEnv } from '../../providers/web-search.js';
import type { RunExecution, RunExecutor, RunKind, RunOutcome } from '../../runs/index.js';
import { RunGoneError, toolCallStore } from '../../runs/index.js';
import { coalesceWindowMs, TextCoalescer } from '../../runs/text-coalescer.js';
import { inToolSpan } from '../../telemetry/runs.js';
import {
  APPROVAL_DEADLINE_DEFAULT_MS,
  approvalOutcome,
  decidedEvent,
  needsApproval,
  requestApproval,
} from './approvals.js';
import { effectiveConfig } from './config.js';
import { TOOL_RESPONSE_MAX_BYTES } from './guarded-fetch.js';
import { parseAllowlist } from './outbound.js';
import type { AgentConfig } from './schema.js';
import { type AgentRow, toAgent } from './service.js';
import { type AgentTool, buildToolset, memoryNotes, type ToolContext, type ToolEnv } from './tools.js';
import { turnFinalWrites } from './turn-end.js';
import { type AdmittedHold, MESSAGES_ENDPOINT, turnHoldGuesses } from './turn-hold.js';

/** What a turn needs beyond ServerDeps: the model provider and metering. */
export type RuntimeDeps = ServerDeps & { llm?: LlmProvider; models?: ModelCatalog; metering?: Metering };

interface TurnState {
  messages: LlmMessage[];
  iterations: number;
  /** Execution time used so far (ms): the wall-clock cap counts working time, not waits. */
  elapsedMs: number;
  /**
   * Calls this turn is waiting on (integrator-owned, or a person's decision when `approval`):
   * our id → the model's call id.
   */
  pending: { id: string; modelCallId: string; name: string; approval?: boolean }[];
}

/** Characters of a call's tool definitions (counted in its prompt, ~4 a token). */
const toolChars = (tools: ToolDefinition[]) => (tools.length > 0 ? JSON.stringify(tools).length : 0);

/** The hold the admission took for this turn's first call, handed over once. */
function takeAdmittedHold(exec: RunExecution): AdmittedHold | undefined {
  const hold = exec.local?.hold as AdmittedHold | undefined;
  if (hold && exec.local) exec.local.hold = undefined;
  return hold;
}
const num = (v: string | undefined, d: number) => (v && Number.isFinite(Number(v)) ? Number(v) : d);

type Row = Record<string, unknown>;

/** A model call's reply; `meter` is left unsettled for a final reply (settled with the run's end). */
interface ModelReply {
  text: string;
  toolCalls: ToolCall[];
  meter?: GenerationMeter;
}

/**
 * The assist-mode turn: call the model with the agent's tools, stream text deltas, run the
 * tools the service owns, pause on the ones the integrator owns, until the model answers,
 * `maxIterations`, `maxWallClockMs`, cancellation, or a failure.
 */
/** How another run kind reuses the agent loop (autonomous runs: src/domains/runs). */
export interface AgentLoopOptions {
  kind?: RunKind;
  /** Endpoint recorded on usage records. */
  endpoint?: string;
  /** Tools added to the agent's toolset for this run kind (e.g. `deliverable_write`). */
  extraTools?: (ctx: ToolContext, exec: RunExecution) => AgentTool[];
}

export class TurnExecutor implements RunExecutor {
  readonly kind: RunKind;
  private readonly toolEnv: ToolEnv;
  /** `AGENT_STREAM_COALESCE_MS`: the window text deltas are merged over (0: one per model chunk). */
  private readonly coalesceMs: number;
  private readonly toolDeadlineMs: number;
  /** `AGENT_APPROVAL_DEADLINE_MS`: how long a call waits for a person's decision. */
  private readonly approvalDeadlineMs: number;

  constructor(
    private readonly deps: RuntimeDeps,
    private readonly loop: AgentLoopOptions = {},
  ) {
    this.kind = loop.kind ?? 'turn';
    const env = deps.config.env;
    this.coalesceMs = coalesceWindowMs(env.AGENT_STREAM_COALESCE_MS);
    this.toolEnv = {
      em: deps.em,
      log: deps.log,
      policy: parseAllowlist(env.OUTBOUND_ALLOWLIST),
      searchProviders: webSearchProvidersFromEnv(env),
      signingSecret: deps.config.signingSecret as string,
      callbackTimeoutMs: num(env.AGENT_CALLBACK_TIMEOUT_MS, 30_000),
      toolResponseMaxBytes: num(env.AGENT_TOOL_RESPONSE_MAX_BYTES, TOOL_RESPONSE_MAX_BYTES),
      fetchMaxBytes: num(env.WEB_FETCH_MAX_BYTES, 2_000_000),
      fetchTimeoutMs: num(env.WEB_FETCH_TIMEOUT_MS, 15_000),
    };
    this.toolDeadlineMs = num(env.AGENT_TOOL_CALL_DEADLINE_MS, 600_000);
    this.approvalDeadlineMs = num(env.AGENT_APPROVAL_DEADLINE_MS, APPROVAL_DEADLINE_DEFAULT_MS);
  }

  async execute(exec: RunExecution): Promise<RunOutcome> {
    try {
      return await this.executeTurn(exec);
    } finally {
      // A hold the admission took for a first call that never came: given back, no record.
      await takeAdmittedHold(exec)
        ?.meter.release()
        .catch((err) => this.deps.log.error({ err, runId: exec.run.id }, 'releasing a credit hold failed'));
    }
  }

  private async executeTurn(exec: RunExecution): Promise<RunOutcome> {
    const { run } = exec;
    // Forked when first needed: a plain turn whose agent the admission read needs none.
    let forked: EntityManager | undefined;
    const em = () => (forked ??= exec.em());
    // The admitting request read the agent already when the turn started in its process.
    const preloaded = exec.local?.agent as Row | null | undefined;
    const agent =
      preloaded && preloaded.id === run.appId && preloaded.workspace_id === run.workspaceId
        ? toAgent(preloaded)
        : await loadAgent(em(), run.appId as string, run.workspaceId);
    if (!agent) return { status: 'failed', error: 'Agent not found' };
    const config = effectiveConfig(agent.config);
    const { llm, models } = this.deps;
    let model: ModelInfo;
    try {
      if (!llm || !models) throw appError('NO_AI_MODEL_CONFIGURED');
      model = models.resolve('chat', (run.input.model as string | null) ?? agent.modelId);
    } catch (err) {
      return this.fail(exec, err);
    }
    const ctx: ToolContext = {
      agent,
      config,
      workspaceId: run.workspaceId,
      sessionId: run.sessionId,
      runId: run.id,
    };
    const state = (run.state as TurnState | null) ?? (await this.initialState(em, agent, config, ctx, run));

    let startedAt = Date.now();
    const budgetMs = config.compute.maxWallClockMs - state.elapsedMs;
    const wallClock = AbortSignal.timeout(Math.max(1, budgetMs));
    const signal = AbortSignal.any([exec.signal, wallClock]);
    const toolset = await buildToolset(this.toolEnv, ctx, signal).catch((err) => {
      if (signal.aborted) return null;
      throw err;
    });
    try {
      if (!toolset) return this.wallClockOrAbort(exec, wallClock, config);
      for (const w of toolset.warnings) {
        await exec.emit('warning', {
          runId: run.id,
          code: 'MCP_SERVER_UNAVAILABLE',
          message: w.message,
          server: w.server,
        });
      }
      for (const t of this.loop.extraTools?.(ctx, exec) ?? []) toolset.tools.set(t.definition.name, t);
      if (state.pending.length > 0) {
        // Resume: answer the model's calls with what the integrator, a person or the deadline gave.
        await this.resumePending(exec, em(), state, toolset.tools, signal);
        state.elapsedMs += Date.now() - startedAt;
        startedAt = Date.now();
        await exec.checkpoint(state as unknown as Record<string, unknown>);
        // An approved integrator-owned tool now waits on the integrator.
        if (state.pending.length > 0) return { status: 'waiting' };
      }
      const defs = [...toolset.tools.values()].map((t) => t.definition);
      // The same definitions go with every call of this execution: counted once.
      const defsChars = toolChars(defs);
      if (this.kind === 'turn' && run.sessionId && preloaded && !run.state) {
        // What the next turn's admission holds for its first call (decision 0029): the
        // first call's prompt besides the user's message, when nothing else varies per turn.
        if (config.capabilities.memory.enabled || Array.isArray(run.input.history)) {
          turnHoldGuesses.delete(run.sessionId);
        } else {
          turnHoldGuesses.set(run.sessionId, {
            agentId: agent.id,
            agentUpdatedAt: String(preloaded.updated_at),
            modelOverride: (run.input.model as string | null) ?? null,
            modelId: model.id,
            fixedChars: messageChars(state.messages) + defsChars - String(run.input.message ?? '').length,
          });
        }
      }
      while (state.iterations < config.compute.maxIterations) {
        state.iterations++;
        let reply: ModelReply;
        try {
          reply = await this.callModel(exec, model, state.messages, defs, defsChars, signal);
        } catch (err) {
          if (err instanceof RunGoneError) throw err;
          if (wallClock.aborted && !exec.signal.aborted) {
            return this.wallClockOrAbort(exec, wallClock, config);
          }
          if (exec.signal.aborted) throw err;
          return this.fail(exec, err);
        }
        if (reply.toolCalls.length === 0) {
          // The final message, `message.completed` and the settlement go with the end of the run.
          return {
            status: 'completed',
            payload: {},
            final: turnFinalWrites(run, reply.text, reply.meter, this.deps.db.sql, this.deps.log),
          };
        }
        if (reply.text) {
          const messageId = await this.saveMessage(run, 'assistant', reply.text, {});
          await exec.emit('message.completed', { runId: run.id, messageId, content: reply.text });
        }
        state.messages.push({ role: 'assistant', content: reply.text || null, toolCalls: reply.toolCalls });
        for (const call of reply.toolCalls) {
          await this.handleToolCall(exec, em(), state, config, toolset.tools.get(call.name), call, signal);
        }
        state.elapsedMs += Date.now() - startedAt;
        await exec.checkpoint(state as unknown as Record<string, unknown>);
        if (state.pending.length > 0) return { status: 'waiting' };
        if (wallClock.aborted && !exec.signal.aborted) return this.wallClockOrAbort(exec, wallClock, config);
      }
      const error = `maxIterations reached (${config.compute.maxIterations})`;
      await exec.emit('error', { code: 'MAX_ITERATIONS', message: error });
      return { status: 'failed', error };
    } finally {
      // A failing close must not lose the outcome (a final reply's settlement rides on it).
      await toolset
        ?.close()
        .catch((err) => this.deps.log.warn({ err, runId: run.id }, 'closing the toolset failed'));
    }
  }

  private async initialState(
    em: () => EntityManager,
    agent: AgentRow,
    config: AgentConfig,
    ctx: ToolContext,
    run: RunExecution['run'],
  ): Promise<TurnState> {
    const messages: LlmMessage[] = [];
    let system = agent.prompt ?? '';
    if (config.capabilities.memory.enabled) {
      const notes = await memoryNotes(em(), ctx);
      if (notes.length > 0) system += `\n\nLong-term memory notes:\n${notes.map((n) => `- ${n}`).join('\n')}`;
    }
    if (system.trim()) messages.push({ role: 'system', content: system.trim() });
    if (config.capabilities.memory.enabled && run.sessionId) {
      const history = await em().execute<Row[]>(
        `select role, content from session_messages
         where session_id = ? and (run_id is null or run_id <> ?) and role in ('user', 'assistant')
         order by created_at, id`,
        [run.sessionId, run.id],
      );
      for (const h of history.slice(-50)) {
        messages.push({ role: h.role as 'user' | 'assistant', content: h.content as string });
      }
    }
    // A conversation the turn was seeded with (the OpenAI-compatible surface, a new session).
    if (Array.isArray(run.input.history)) messages.push(...(run.input.history as LlmMessage[]));
    messages.push({ role: 'user', content: String(run.input.message ?? '') });
    return { messages, iterations: 0, elapsedMs: 0, pending: [] };
  }

  /**
   * One model call: streams deltas as events; the generation meter re-checks credits as
   * text streams (402 mid-stream) and debits + records usage once, even when aborted.
   */
  private async callModel(
    exec: RunExecution,
    model: ModelInfo,
    messages: LlmMessage[],
    tools: ToolDefinition[],
    /** `toolChars(tools)`. */
    defsChars: number,
    signal: AbortSignal,
  ): Promise<ModelReply> {
    const { run } = exec;
    const llm = this.deps.llm as LlmProvider;
    // The hold covers the prompt (messages and tool definitions, ~4 characters per token)
    // and the expected reply; the usage record keeps that input estimate if the call ends
    // before the upstream reports usage.
    const inputChars = messageChars(messages) + defsChars;
    const endpoint = this.loop.endpoint ?? MESSAGES_ENDPOINT;
    // The admission's hold is the one `startGeneration` would take only for exactly the
    // guessed prompt and model (decision 0029); otherwise it goes back and the call takes
    // its own.
    let admitted = takeAdmittedHold(exec);
    if (
      admitted &&
      (admitted.inputChars !== inputChars || admitted.modelId !== model.id || endpoint !== MESSAGES_ENDPOINT)
    ) {
      await admitted.meter.release();
      admitted = undefined;
    }
    const meter =
      admitted?.meter ??
      (await this.deps.metering?.startGeneration(
        {
          workspaceId: run.workspaceId,
          apiKeyId: (run.input.apiKeyId as string | null) ?? null,
          appId: run.appId,
          sessionId: run.sessionId,
          runId: run.id,
          requestId: String(run.input.requestId || run.id),
          endpoint,
          model,
          meter: 'credits',
        },
        // The balance row is released at commit, not after the WAL flush (decision 0029).
        { inputTokens: estimateTokens(inputChars), asyncCommit: true },
      ));
    // Text deltas merged over a short window (docs/run-engine.md, "Coalesced deltas").
    const deltas = new TextCoalescer(this.coalesceMs, (content) =>
      exec.emit('message.delta', { runId: run.id, content }),
    );
    const call = new MeteredCall(llm, meter, signal, (err) => err instanceof RunGoneError);
    const logSettle = (e: unknown) =>
      this.deps.log.error({ err: e, runId: run.id }, 'recording agent usage failed');
    return metered(
      call,
      async (): Promise<ModelReply> => {
        try {
          await call.stream({ model, messages, tools: tools.length > 0 ? tools : undefined }, (t) =>
            deltas.push(t),
          );
          await deltas.flush();
        } catch (err) {
          // The text that came before the failure is shown, as it would have been without the window.
          if (!(err instanceof RunGoneError)) await deltas.flush().catch(() => undefined);
          deltas.discard();
          throw err;
        }
        const { text, toolCalls } = call;
        // A final reply (no tool calls) is settled by the statement that ends the run.
        if (toolCalls.length === 0 && meter) return { text, toolCalls, meter: call.handOver() };
        await call.settle('success');
        return { text, toolCalls };
      },
      logSettle,
    );
  }

  /** Answers the calls the turn waited on, in the order the model made them. */
  private async resumePending(
    exec: RunExecution,
    em: EntityManager,
    state: TurnState,
    tools: Map<string, AgentTool>,
    signal: AbortSignal,
  ): Promise<void> {
    const { run } = exec;
    const calls = new Map((await toolCallStore.toolCallsOfRun(em, run.id)).map((c) => [c.id, c]));
    const waited = state.pending;
    state.pending = [];
    for (const p of waited) {
      const c = calls.get(p.id);
      const call = { id: p.modelCallId, name: p.name };
      if (p.approval) {
        const outcome = approvalOutcome(c);
        await exec.emit('tool_call.approval_decided', decidedEvent(run.id, c, p.id, p.name));
        const approval = {
          status: c?.status ?? 'failed',
          ...(c?.status === 'denied' ? { reason: c.error } : {}),
        };
        if (outcome.approved) {
          await this.dispatch(
            exec,
            em,
            state,
            tools.get(p.name),
            call,
            outcome.arguments,
            undefined,
            signal,
            {
              toolCallId: p.id,
              approval,
            },
          );
        } else {
          await this.answer(
            exec,
            state,
            call,
            p.id,
            (c?.arguments ?? {}) as Record<string, unknown>,
            {
              error: outcome.error,
            },
            { approval },
          );
        }
        continue;
      }
      const content =
        c?.status === 'completed'
          ? JSON.stringify(c.result ?? null)
          : JSON.stringify({ error: c?.error ?? 'Tool call failed' });
      state.messages.push({ role: 'tool', toolCallId: p.modelCallId, content });
      await this.saveMessage(run, 'tool', content, {
        toolCallId: p.id,
        name: p.name,
        arguments: c?.arguments ?? {},
      });
    }
  }

  private async handleToolCall(
    exec: RunExecution,
    em: EntityManager,
    state: TurnState,
    config: AgentConfig,
    tool: AgentTool | undefined,
    call: ToolCall,
    signal: AbortSignal,
  ): Promise<void> {
    let args: Record<string, unknown> = {};
    let badArgs: string | undefined;
    try {
      const parsed = call.arguments ? JSON.parse(call.arguments) : {};
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) args = parsed;
      else badArgs = 'Tool arguments must be a JSON object';
    } catch {
      badArgs = 'Tool arguments are not valid JSON';
    }
    if (tool && !badArgs && needsApproval(config, call.name)) {
      // Nothing runs before a person decides (docs/agents.md, "Tool approval").
      const id = await requestApproval(this.deps.runs, em, exec, tool, call, args, this.approvalDeadlineMs);
      state.pending.push({ id, modelCallId: call.id, name: call.name, approval: true });
      return;
    }
    await this.dispatch(exec, em, state, tool, call, args, badArgs, signal);
  }

  /** Runs a call in the service, or hands an integrator-owned one to the integrator. */
  private async dispatch(
    exec: RunExecution,
    em: EntityManager,
    state: TurnState,
    tool: AgentTool | undefined,
    call: Pick<ToolCall, 'id' | 'name'>,
    args: Record<string, unknown>,
    badArgs: string | undefined,
    signal: AbortSignal,
    approved?: { toolCallId: string; approval: Record<string, unknown> },
  ): Promise<void> {
    const { run } = exec;
    if (tool?.owner === 'integrator' && !badArgs) {
      const tc = await this.deps.runs.createToolCall(em, {
        runId: run.id,
        workspaceId: run.workspaceId,
        sessionId: run.sessionId,
        modelCallId: call.id,
        name: call.name,
        arguments: args,
        deadlineMs: this.toolDeadlineMs,
      });
      state.pending.push({ id: tc.id, modelCallId: call.id, name: call.name });
      await exec.emit('tool_call.pending', {
        runId: run.id,
        toolCallId: tc.id,
        name: call.name,
        arguments: args,
        deadline: tc.deadlineAt.toISOString(),
      });
      return;
    }
    const toolCallId = approved?.toolCallId ?? `call_${randomBytes(12).toString('hex')}`;
    await exec.emit('tool_call.started', { runId: run.id, toolCallId, name: call.name, arguments: args });
    let outcome: { result: unknown } | { error: string };
    if (!tool?.run) outcome = { error: `Unknown tool: ${call.name}` };
    else if (badArgs) outcome = { error: badArgs };
    else {
      try {
        const run = tool.run;
        outcome = {
          result: await inToolSpan({ name: call.name, callId: toolCallId, type: tool.owner }, () =>
            run(args, signal),
          ),
        };
      } catch (err) {
        if (exec.signal.aborted) throw err;
        outcome = { error: err instanceof Error ? err.message : String(err) };
      }
    }
    await this.answer(
      exec,
      state,
      call,
      toolCallId,
      args,
      outcome,
      approved ? { approval: approved.approval } : {},
    );
  }

  /** `tool_call.completed`, the model's tool message and the session's record of it. */
  private async answer(
    exec: RunExecution,
    state: TurnState,
    call: Pick<ToolCall, 'id' | 'name'>,
    toolCallId: string,
    args: Record<string, unknown>,
    outcome: { result: unknown } | { error: string },
    meta: Record<string, unknown> = {},
  ): Promise<void> {
    const { run } = exec;
    const body = 'result' in outcome ? { result: outcome.result } : { error: outcome.error };
    await exec.emit('tool_call.completed', {
      runId: run.id,
      toolCallId,
      name: call.name,
      status: 'result' in outcome ? 'completed' : 'error',
      ...body,
    });
    const content = JSON.stringify('result' in outcome ? (outcome.result ?? null) : { error: outcome.error });
    state.messages.push({ role: 'tool', toolCallId: call.id, content });
    await this.saveMessage(run, 'tool', content, { toolCallId, name: call.name, arguments: args, ...meta });
  }

  private async saveMessage(
    run: RunExecution['run'],
    role: 'assistant' | 'tool',
    content: string,
    metadata: Record<string, unknown>,
  ): Promise<string> {
    const id = randomUUID();
    if (!run.sessionId) return id;
    // On the plain pool (off the ORM): one autocommitted statement either way (decision 0029).
    await this.deps.db.sql.execute(
      `with m as (
         insert into session_messages (id, workspace_id, session_id, run_id, role, content, metadata)
         values (?, ?, ?, ?, ?, ?, ?::jsonb) returning session_id)
       update agent_sessions set last_message_at = now() where id = (select session_id from m)`,
      [id, run.workspaceId, run.sessionId, run.id, role, content, JSON.stringify(metadata)],
    );
    return id;
  }

  private async fail(exec: RunExecution, err: unknown): Promise<RunOutcome> {
    const e =
      err instanceof AppError
        ? err
        : appError('AGENT_MODEL_ERROR', { detail: err instanceof Error ? err.message : String(err) });
    const code =
      e.code ??
      (e.status === 503 ? 'MODEL_UNAVAILABLE' : e.status === 402 ? 'INSUFFICIENT_CREDITS' : 'MODEL_ERROR');
    await exec.emit('error', { code, message: e.message });
    return { status: 'failed', error: e.message };
  }

  private async wallClockOrAbort(
    exec: RunExecution,
    wallClock: AbortSignal,
    config: AgentConfig,
  ): Promise<RunOutcome> {
    if (exec.signal.aborted || !wallClock.aborted) throw new Error('aborted');
    const error = `maxWallClockMs exceeded (${config.compute.maxWallClockMs} ms)`;
    await exec.emit('error', { code: 'MAX_WALL_CLOCK', message: error });
    return { status: 'failed', error };
  }
}

async function loadAgent(em: EntityManager, appId: string, workspaceId: string): Promise<AgentRow | null> {
  const rows = await em.execute<Row[]>(
    `select * from apps where id = ? and workspace_id = ? and app_type = 'agent'`,
    [appId, workspaceId],
  );
  const r = rows[0];
  return r ? toAgent(r) : null;
}

export function registerAgentRuntime(deps: ServerDeps): void {
  // Turns are a hot path: their holds, settlements and usage records (batched) go through the
  // plain pool, off the ORM (decision 0029).
  deps.runs.register(new TurnExecutor({ ...deps, metering: deps.poolMetering } as RuntimeDeps));
}

export { turnFinalWrites };
