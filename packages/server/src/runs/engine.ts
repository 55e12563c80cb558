import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { badRequest } from '../http/errors.js';
import type { RunBus } from './bus.js';
import { type NewRun, runStore } from './store.js';
import {
  isTerminalEvent,
  type RunEvent,
  type RunExecution,
  type RunExecutor,
  RunGoneError,
  type RunKind,
  type RunOutcome,
  type RunRecord,
  type ToolCallRecord,
} from './types.js';

export interface RunEngineOptions {
  em: () => EntityManager;
  log: Logger;
  bus: RunBus;
  /** How long a lease lasts without a heartbeat (ms). */
  leaseMs?: number;
  /** How often idle workers and stream readers look again without a bus message (ms). */
  pollMs?: number;
  /** Runs executed at once by this process; 0 disables the workers (HTTP-only process). */
  concurrency?: number;
}

export const WORKER_LOST_ERROR = 'Worker lost: the run lease expired';
const SHUTDOWN_ERROR = 'Server shut down during the run';

/**
 * The durable run engine (docs/run-engine.md). Runs live in Postgres; workers in any
 * process lease them with `FOR UPDATE SKIP LOCKED`, heartbeat the lease, and hand them to the
 * executor of their kind. Every state change is an event in the run's append-only log;
 * streams replay the log and tail it through the bus.
 */
export class RunEngine {
  readonly workerId = `worker-${randomUUID()}`;
  private readonly executors = new Map<RunKind, RunExecutor>();
  private readonly active = new Map<string, AbortController>();
  private readonly leaseMs: number;
  private readonly pollMs: number;
  private readonly concurrency: number;
  private stopped = true;
  private wake: (() => void) | undefined;
  private loopDone: Promise<void> | undefined;
  private offWake: (() => void) | undefined;
  private lastSweep = 0;

  constructor(private readonly opts: RunEngineOptions) {
    this.leaseMs = opts.leaseMs ?? 30_000;
    this.pollMs = opts.pollMs ?? 1000;
    this.concurrency = opts.concurrency ?? 4;
  }

  get bus(): RunBus {
    return this.opts.bus;
  }

  register(executor: RunExecutor): void {
    this.executors.set(executor.kind, executor);
    this.kick();
  }

  async start(): Promise<void> {
    await this.opts.bus.start();
    this.stopped = false;
    this.offWake = this.opts.bus.onWake(() => this.kick());
    if (this.concurrency > 0) this.loopDone = this.loop();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.offWake?.();
    this.kick();
    for (const c of this.active.values()) c.abort('shutdown');
    await this.loopDone;
    const deadline = Date.now() + 5000;
    while (this.active.size > 0 && Date.now() < deadline) await sleep(20);
    await this.opts.bus.close();
  }

  /** Creates a pending run and wakes the workers (of every process). */
  async createRun(em: EntityManager, run: NewRun): Promise<RunRecord> {
    const created = await runStore.insertRun(em, run);
    await this.opts.bus.publish({ t: 'wake' });
    return created;
  }

  getRun(em: EntityManager, runId: string): Promise<RunRecord | null> {
    return runStore.getRun(em, runId);
  }

  /** Appends an event from outside an execution (e.g. a tool result arriving). */
  async appendEvent(runId: string, type: string, payload: Record<string, unknown>): Promise<RunEvent | null> {
    const ev = await runStore.appendEvent(this.opts.em(), runId, type, payload);
    if (ev) await this.opts.bus.publish({ t: 'event', runId, seq: ev.seq });
    return ev;
  }

  /**
   * Replays the log after `afterSeq`, then tails it until the terminal event (or `signal`).
   * Any process can serve any run's stream.
   */
  async *stream(runId: string, afterSeq = 0, signal?: AbortSignal): AsyncGenerator<RunEvent> {
    let last = afterSeq;
    let dirty = false;
    let notify: (() => void) | undefined;
    const off = this.opts.bus.onEvent(runId, () => {
      dirty = true;
      notify?.();
    });
    try {
      while (!signal?.aborted) {
        dirty = false;
        const events = await runStore.readEvents(this.opts.em(), runId, last);
        for (const e of events) {
          last = e.seq;
          yield e;
          if (isTerminalEvent(e.type)) return;
        }
        if (events.length > 0 || dirty) continue;
        await new Promise<void>((resolve) => {
          const done = () => {
            clearTimeout(timer);
            signal?.removeEventListener('abort', done);
            notify = undefined;
            resolve();
          };
          const timer = setTimeout(done, this.pollMs);
          signal?.addEventListener('abort', done, { once: true });
          notify = done;
        });
      }
    } finally {
      off();
    }
  }

  /**
   * Cancels a running run: the state changes first (so nothing more is appended), the
   * terminal event is written, and the worker holding it aborts its upstream calls.
   */
  async cancel(em: EntityManager, run: RunRecord): Promise<void> {
    const ev = await runStore.finish(em, run.id, null, 'cancelled', {});
    if (!ev) {
      const now = await runStore.getRun(em, run.id);
      throw badRequest(`Run is ${now?.status ?? run.status}`);
    }
    await this.opts.bus.publish({ t: 'event', runId: run.id, seq: ev.seq });
    await this.opts.bus.publish({ t: 'cancel', runId: run.id });
    await this.opts.bus.publish({ t: 'wake' });
  }

  /** Persists a tool call that someone outside the engine will settle. */
  createToolCall(
    em: EntityManager,
    call: Parameters<typeof runStore.insertToolCall>[1],
  ): Promise<ToolCallRecord> {
    return runStore.insertToolCall(em, call);
  }

  /**
   * Settles a pending tool call (once: a repeat returns null) and resumes its run when no
   * other call of it is still pending.
   */
  async settleToolCall(
    id: string,
    outcome: { result: unknown } | { error: string; expired?: boolean },
  ): Promise<ToolCallRecord | null> {
    const em = this.opts.em();
    const call = await runStore.settleToolCall(em, id, outcome);
    if (!call) return null;
    await this.appendEvent(call.runId, 'tool_call.completed', {
      runId: call.runId,
      toolCallId: call.id,
      name: call.name,
      status: call.status === 'completed' ? 'completed' : 'error',
      ...(call.status === 'completed' ? { result: call.result } : { error: call.error }),
    });
    if (await runStore.unpark(em, call.runId)) await this.opts.bus.publish({ t: 'wake' });
    return call;
  }

  private kick(): void {
    this.wake?.();
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      try {
        await this.sweep();
        while (!this.stopped && this.active.size < this.concurrency) {
          const run = await runStore.claim(this.opts.em(), this.workerId, this.leaseMs, [
            ...this.executors.keys(),
          ]);
          if (!run) break;
          void this.execute(run);
        }
      } catch (err) {
        if (!this.stopped) this.opts.log.error({ err }, 'run worker loop failed');
      }
      if (this.stopped) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, this.pollMs);
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.wake = done;
      });
      this.wake = undefined;
    }
  }

  /** Settles tool calls past their deadline, so a forgotten call never wedges a run. */
  private async sweep(): Promise<void> {
    if (Date.now() - this.lastSweep < this.pollMs) return;
    this.lastSweep = Date.now();
    for (const id of await runStore.overdueToolCalls(this.opts.em())) {
      await this.settleToolCall(id, { error: 'Tool call deadline expired', expired: true });
    }
  }

  private async execute(run: RunRecord & { recovered: boolean }): Promise<void> {
    const controller = new AbortController();
    this.active.set(run.id, controller);
    const offCancel = this.opts.bus.onCancel(run.id, () => controller.abort('cancelled'));
    const em = this.opts.em;
    const heartbeat = setInterval(
      () => {
        runStore
          .heartbeat(em(), run.id, this.workerId, this.leaseMs)
          .then((ok) => {
            if (!ok) controller.abort('lease lost');
          })
          .catch((err) => this.opts.log.warn({ err, runId: run.id }, 'run heartbeat failed'));
      },
      Math.max(50, Math.floor(this.leaseMs / 3)),
    );
    heartbeat.unref();
    const log = this.opts.log.child({ runId: run.id, kind: run.kind });
    try {
      if (run.recovered && run.attempts > run.maxAttempts) {
        await this.finish(run.id, 'failed', { error: WORKER_LOST_ERROR }, WORKER_LOST_ERROR);
        return;
      }
      if (run.recovered) log.warn({ attempt: run.attempts }, 'recovering a run whose worker died');
      const executor = this.executors.get(run.kind);
      if (!executor) throw new Error(`No executor for run kind ${run.kind}`);
      if (run.lastSeq === 0)
        await this.emitFor(run.id, 'run.started', { runId: run.id, sessionId: run.sessionId });
      const exec: RunExecution = {
        run,
        signal: controller.signal,
        emit: (type, payload = {}) => this.emitFor(run.id, type, payload),
        checkpoint: (state) => runStore.checkpoint(em(), run.id, this.workerId, state),
        em,
      };
      let outcome: RunOutcome;
      try {
        outcome = await executor.execute(exec);
      } catch (err) {
        if (controller.signal.aborted || err instanceof RunGoneError) {
          await this.afterAbort(run, controller.signal.reason);
          return;
        }
        log.error({ err }, 'run executor failed');
        outcome = { status: 'failed', error: err instanceof Error ? err.message : String(err) };
      }
      if (
        controller.signal.aborted &&
        controller.signal.reason !== undefined &&
        outcome.status !== 'failed'
      ) {
        await this.afterAbort(run, controller.signal.reason);
        return;
      }
      if (outcome.status === 'waiting') {
        await runStore.park(em(), run.id, this.workerId);
        // A result may have arrived before the lease was released.
        if (await runStore.unpark(em(), run.id)) this.kick();
      } else if (outcome.status === 'completed') {
        await this.finish(run.id, 'completed', outcome.payload ?? {});
      } else {
        await this.finish(run.id, 'failed', { error: outcome.error }, outcome.error);
      }
    } catch (err) {
      log.error({ err }, 'run execution failed');
    } finally {
      clearInterval(heartbeat);
      offCancel();
      this.active.delete(run.id);
      // A finished run may unblock the next run of its serial key, here or elsewhere.
      void this.opts.bus.publish({ t: 'wake' });
    }
  }

  private async afterAbort(run: RunRecord, reason: unknown): Promise<void> {
    if (reason !== 'shutdown') return; // cancelled or lease lost: someone else owns the outcome
    const current = await runStore.getRun(this.opts.em(), run.id);
    if (current?.status !== 'running' || current.leaseOwner !== this.workerId) return;
    if (current.attempts < current.maxAttempts) {
      // Let another process take it over at once.
      await this.opts
        .em()
        .execute('update runs set lease_expires_at = now() where id = ? and lease_owner = ?', [
          run.id,
          this.workerId,
        ]);
    } else {
      await this.finish(run.id, 'failed', { error: SHUTDOWN_ERROR }, SHUTDOWN_ERROR);
    }
  }

  private async finish(
    runId: string,
    status: 'completed' | 'failed',
    payload: Record<string, unknown>,
    error: string | null = null,
  ): Promise<void> {
    const ev = await runStore.finish(this.opts.em(), runId, this.workerId, status, payload, error);
    if (ev) await this.opts.bus.publish({ t: 'event', runId, seq: ev.seq });
  }

  private async emitFor(runId: string, type: string, payload: Record<string, unknown>): Promise<number> {
    const ev = await runStore.appendEvent(this.opts.em(), runId, type, payload);
    if (!ev) throw new RunGoneError(runId);
    await this.opts.bus.publish({ t: 'event', runId, seq: ev.seq });
    return ev.seq;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
