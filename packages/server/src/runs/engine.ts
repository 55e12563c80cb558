import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { SqlExecutor } from '../db/sql.js';
import { appError } from '../errors/index.js';
import { inRunSpan } from '../telemetry/runs.js';
import type { RunBus } from './bus.js';
import { RunExecutions } from './execution.js';
import { EventWriter, LiveLog } from './live-log.js';
import { DEFAULT_RETRY_POLICY, maxAttemptsFor, type RetryPolicy } from './retry.js';
import { type NewRun, runStore, WORKER_LOST_REASON } from './store.js';
import { toolCallStore } from './tool-calls.js';
import {
  isTerminalEvent,
  type RunEvent,
  type RunExecutor,
  type RunKind,
  type RunRecord,
  type ToolCallRecord,
} from './types.js';

export interface RunEngineOptions {
  em: () => EntityManager;
  /**
   * The plain pool (`db/sql.ts`): the end of an execution (`finish`) runs there as one
   * statement, off the ORM (decision 0021), with the executor's final writes.
   */
  sql: SqlExecutor;
  log: Logger;
  bus: RunBus;
  /** How long a lease lasts without a heartbeat (ms). */
  leaseMs?: number;
  /** How often idle workers and stream readers look again without a bus message (ms). */
  pollMs?: number;
  /**
   * Autonomous (CPU- or tool-heavy) runs executed at once by this process; 0 disables every
   * worker of the process, turns included (an HTTP-only process).
   */
  concurrency?: number;
  /** Agent turns (I/O-bound streams) executed at once by this process. */
  turnConcurrency?: number;
  /** Longest time an event waits in memory before its batch is written (ms). */
  eventFlushMs?: number;
  /** A batch of events is written at once when this many wait. */
  eventBatchMax?: number;
  /**
   * Recovery beyond the runs, at each sweep: metering settles the credit holds whose process
   * died (their lease expired), refunding what they did not use.
   */
  onSweep?: () => Promise<unknown>;
  /** Executions per kind and the backoff between them (docs/run-engine.md, "Retries"). */
  retry?: RetryPolicy;
}

/** The error of a run whose worker died on its only attempt (a turn). */
export const WORKER_LOST_ERROR = WORKER_LOST_REASON;

interface Execution {
  kind: RunKind;
  controller: AbortController;
  log: LiveLog;
  done: Promise<void>;
}

/**
 * The durable run engine (docs/run-engine.md). Runs live in Postgres; workers in any
 * process lease them with `FOR UPDATE SKIP LOCKED`, heartbeat the lease, and hand them to the
 * executor of their kind (each execution: `RunExecutions`, execution.ts). Every state change is an event in the run's append-only log. The
 * worker hands events to this process's readers from memory and writes them in batches;
 * readers elsewhere (or behind) replay the log from the database and tail it through the bus.
 */
export class RunEngine {
  readonly workerId = `worker-${randomUUID()}`;
  private readonly executors = new Map<RunKind, RunExecutor>();
  private readonly active = new Map<string, Execution>();
  private readonly logs = new Map<string, LiveLog>();
  private readonly writer: EventWriter;
  private readonly executions: RunExecutions;
  private readonly leaseMs: number;
  private readonly pollMs: number;
  private readonly concurrency: number;
  private readonly turnConcurrency: number;
  private readonly retry: RetryPolicy;
  private stopped = true;
  private wake: (() => void) | undefined;
  private loopDone: Promise<void> | undefined;
  private offWake: (() => void) | undefined;
  private lastSweep = 0;
  /**
   * Whether a claim may find a run when an execution ends (decision 0021): wake-ups seen
   * (a run queued, resumed or cancelled anywhere), and whether the last claim pass left kinds
   * out for want of a slot. A turn that ended quietly — none of these since it started, and no
   * turn queued behind it — starts no claim; the poll still claims every `pollMs`.
   */
  private wakesSeen = 0;
  private starved = false;
  /** Claim statements made by this process's worker loop (observability and tests). */
  claimAttempts = 0;

  constructor(private readonly opts: RunEngineOptions) {
    this.leaseMs = opts.leaseMs ?? 30_000;
    this.pollMs = opts.pollMs ?? 1000;
    this.concurrency = opts.concurrency ?? 4;
    this.turnConcurrency = this.concurrency === 0 ? 0 : (opts.turnConcurrency ?? 256);
    this.retry = opts.retry ?? DEFAULT_RETRY_POLICY;
    this.writer = new EventWriter({
      em: opts.em,
      sql: opts.sql,
      log: opts.log,
      owner: this.workerId,
      flushMs: opts.eventFlushMs ?? 40,
      maxBatch: opts.eventBatchMax ?? 500,
      notification: (msg) => opts.bus.notification(msg),
    });
    this.executions = new RunExecutions(
      opts,
      this.workerId,
      this.leaseMs,
      this.retry,
      this.writer,
      this.executors,
      () => this.kick(),
    );
  }

  get bus(): RunBus {
    return this.opts.bus;
  }

  /** Limits of this process: autonomous runs and turns executed at once. */
  get limits(): { autonomous: number; turns: number } {
    return { autonomous: this.concurrency, turns: this.turnConcurrency };
  }

  /**
   * The lease a request may take for a run it admits, when this process has a free slot of
   * that kind (the run then starts here without a wake-up or a claim round trip: `startClaimed`).
   */
  claimSlot(kind: RunKind): { owner: string; leaseMs: number } | null {
    if (this.stopped || !this.executors.has(kind) || !this.claimableKinds().includes(kind)) return null;
    return { owner: this.workerId, leaseMs: this.leaseMs };
  }

  /** Executes a run the caller inserted already leased by this process (see `claimSlot`). */
  startClaimed(run: RunRecord, local?: Record<string, unknown>): void {
    if (run.leaseOwner !== this.workerId || run.status !== 'running') return;
    this.execute({ ...run, recovered: false }, local);
  }

  register(executor: RunExecutor): void {
    this.executors.set(executor.kind, executor);
    this.kick();
  }

  async start(): Promise<void> {
    await this.opts.bus.start();
    this.stopped = false;
    this.offWake = this.opts.bus.onWake(() => {
      this.wakesSeen++;
      this.kick();
    });
    if (this.concurrency > 0 || this.turnConcurrency > 0) this.loopDone = this.loop();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.offWake?.();
    this.kick();
    for (const x of this.active.values()) x.controller.abort('shutdown');
    await this.loopDone;
    const deadline = Date.now() + 5000;
    while (this.active.size > 0 && Date.now() < deadline) await sleep(20);
    await this.writer.close();
    await this.opts.bus.close();
  }

  /** Runs this process is executing now, by kind (`aisuite_runs_active`). */
  activeByKind(): Map<RunKind, number> {
    const out = new Map<RunKind, number>();
    for (const x of this.active.values()) out.set(x.kind, (out.get(x.kind) ?? 0) + 1);
    return out;
  }

  /** Executions a new run of `kind` is allowed: one, plus the retries of its kind. */
  maxAttempts(kind: RunKind): number {
    return maxAttemptsFor(this.retry, kind);
  }

  /** Creates a pending run and wakes the workers (of every process). */
  async createRun(em: EntityManager, run: NewRun): Promise<RunRecord> {
    const created = await runStore.insertRun(em, {
      ...run,
      maxAttempts: run.maxAttempts ?? this.maxAttempts(run.kind),
    });
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
   * Any process can serve any run's stream. While this process executes the run, events
   * come from memory once the reader has caught up with the first one held there; otherwise
   * from the database, woken by the bus (NOTIFY across processes) or the poll.
   */
  async *stream(runId: string, afterSeq = 0, signal?: AbortSignal): AsyncGenerator<RunEvent> {
    let last = afterSeq;
    let dirty = false;
    /** Ends a wait on the database when a notification about this run arrives. */
    let notify: (() => void) | undefined;
    /** Ends the current wait, whichever it is. */
    let stopWait: (() => void) | undefined;
    // One abort listener for the whole stream, not one per wait (a wait comes between every
    // two events a turn streams).
    const onAbort = () => stopWait?.();
    signal?.addEventListener('abort', onAbort, { once: true });
    const off = this.opts.bus.onEvent(runId, () => {
      dirty = true;
      notify?.();
    });
    /**
     * Until the next event in `live` (or its end), or a notification when waiting on the
     * database (no `live`), or the poll interval, or the reader leaving.
     */
    const pause = (live?: LiveLog) =>
      new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          live?.unwait(done);
          notify = undefined;
          stopWait = undefined;
          resolve();
        };
        const timer = setTimeout(done, this.pollMs);
        if (live) live.onNext(done);
        else notify = done;
        stopWait = done;
      });
    try {
      while (!signal?.aborted) {
        const live = this.logs.get(runId);
        if (live && last >= live.firstSeq - 1) {
          const events = live.since(last);
          for (const e of events) {
            last = e.seq;
            yield e;
            if (isTerminalEvent(e.type)) return;
          }
          if (events.length > 0 || live.ended) continue;
          await pause(live);
          continue;
        }
        dirty = false;
        const { status, events, behind } = await runStore.readLog(this.opts.em(), runId, last);
        if (status === null) return;
        for (const e of events) {
          last = e.seq;
          yield e;
          if (isTerminalEvent(e.type)) return;
        }
        if (events.length > 0 || dirty || this.logs.has(runId)) continue;
        if (behind) {
          // Ended, and its terminal event lies behind this position (read in the same
          // snapshot as the log): events a worker handed out from memory and never wrote (it
          // crashed, or lost its lease) are not replayed. An ended run whose terminal event is
          // not written yet (a cancel its worker is still writing) is waited for.
          yield behind;
          return;
        }
        await pause();
      }
    } finally {
      off();
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Cancels a running run: the state changes first (so nothing more is appended), the
   * worker holding it aborts its upstream calls and writes `run.cancelled` after the events
   * it already handed out (at once when nobody holds it).
   */
  async cancel(em: EntityManager, run: RunRecord): Promise<void> {
    const res = await runStore.cancel(em, run.id);
    if (!res) {
      const now = await runStore.getRun(em, run.id);
      throw appError('RUN_NOT_ACTIVE', { status: now?.status ?? run.status });
    }
    if (res.event) {
      await this.opts.bus.publish({ t: 'event', runId: run.id, seq: res.event.seq });
    } else {
      const local = this.active.get(run.id);
      if (local) {
        local.controller.abort('cancelled');
        await Promise.race([local.done, sleep(5000)]);
      } else {
        await this.opts.bus.publish({ t: 'cancel', runId: run.id });
      }
    }
    await this.opts.bus.publish({ t: 'wake' });
  }

  /** Persists a tool call that someone outside the engine will settle. */
  createToolCall(
    em: EntityManager,
    call: Parameters<typeof toolCallStore.insertToolCall>[1],
  ): Promise<ToolCallRecord> {
    return toolCallStore.insertToolCall(em, call);
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
    const call = await toolCallStore.settleToolCall(em, id, outcome);
    if (!call) return null;
    // A call waiting on a person's decision: the resumed run reports how it ended.
    if (call.kind !== 'approval')
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

  private claimableKinds(): RunKind[] {
    let turns = 0;
    for (const x of this.active.values()) if (x.kind === 'turn') turns++;
    const others = this.active.size - turns;
    const kinds: RunKind[] = [];
    for (const k of this.executors.keys()) {
      if (k === 'turn' ? turns < this.turnConcurrency : others < this.concurrency) kinds.push(k);
    }
    return kinds;
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      try {
        await this.sweep();
        this.starved = false;
        while (!this.stopped) {
          const kinds = this.claimableKinds();
          if (kinds.length < this.executors.size) this.starved = true;
          if (kinds.length === 0) break;
          this.claimAttempts++;
          const run = await runStore.claim(this.opts.em(), this.workerId, this.leaseMs, kinds, this.retry);
          if (!run) break;
          this.execute(run);
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

  /**
   * Settles tool calls past their deadline, so a forgotten call never wedges a run, writes
   * `run.cancelled` for cancelled runs whose worker died before it could, and fails the runs
   * whose worker died on their last attempt (they are never claimed again).
   */
  private async sweep(): Promise<void> {
    if (Date.now() - this.lastSweep < this.pollMs) return;
    this.lastSweep = Date.now();
    const em = this.opts.em();
    for (const id of await toolCallStore.overdueToolCalls(em)) {
      await this.settleToolCall(id, { error: 'Tool call deadline expired', expired: true });
    }
    for (const id of await runStore.abandonedCancels(em)) {
      const ev = await runStore.finishCancel(em, id, null);
      if (ev) await this.opts.bus.publish({ t: 'event', runId: id, seq: ev.seq });
    }
    for (const run of await runStore.failExhausted(em)) {
      this.opts.log.warn(
        { runId: run.id, kind: run.kind, attempts: run.attempts },
        run.error ?? 'run failed',
      );
      await this.opts.bus.publish({ t: 'event', runId: run.id, seq: run.lastSeq });
      await this.executions.tellFailed(run, run.error ?? WORKER_LOST_REASON);
    }
    await this.opts
      .onSweep?.()
      .catch((err) => this.opts.log.warn({ err }, 'run engine: recovery hook failed'));
  }

  private execute(run: RunRecord & { recovered: boolean }, local?: Record<string, unknown>): void {
    const controller = new AbortController();
    const log = new LiveLog(run.id, run.lastSeq, (why) =>
      controller.abort(why === 'cancelled' ? 'cancelled' : 'lease lost'),
    );
    let finished!: () => void;
    const done = new Promise<void>((r) => {
      finished = r;
    });
    this.active.set(run.id, { kind: run.kind, controller, log, done });
    const offCancel = this.opts.bus.onCancel(run.id, () => controller.abort('cancelled'));
    this.logs.set(run.id, log);
    // Readers of this run waiting on the database switch to memory.
    this.opts.bus.localEvent(run.id);
    const wakesAtStart = this.wakesSeen;
    void inRunSpan(run, () => this.executions.executeRun(run, controller, log, local)).then(
      (quiet) => this.ended(run, log, offCancel, finished, quiet && this.wakesSeen === wakesAtStart),
      () => this.ended(run, log, offCancel, finished, false),
    );
  }

  private ended(
    run: RunRecord,
    log: LiveLog,
    offCancel: () => void,
    finished: () => void,
    quiet: boolean,
  ): void {
    offCancel();
    if (this.logs.get(run.id) === log) this.logs.delete(run.id);
    log.end();
    this.active.delete(run.id);
    finished();
    // A finished run may unblock the next run of its serial key, or free the slot a pending
    // run waits for. A turn that ended quietly unblocks nothing a claim could find now.
    if (!(quiet && run.kind === 'turn' && !this.starved)) this.kick();
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
