import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { SqlExecutor } from '../db/sql.js';
import { countLeaseExpiry, countRunRetry } from '../telemetry/metrics.js';
import type { RunBus } from './bus.js';
import type { EventWriter, LiveLog } from './live-log.js';
import { backoffMs, givingUp, type RetryPolicy } from './retry.js';
import { retryTransient, runStore } from './store.js';
import {
  type FinalWrites,
  type RunEvent,
  type RunExecution,
  type RunExecutor,
  RunGoneError,
  type RunKind,
  type RunOutcome,
  type RunRecord,
} from './types.js';

const SHUTDOWN_ERROR = 'Server shut down during the run';

/**
 * The executions of this process's runs, each from its start to its end (docs/run-engine.md):
 * the lease's heartbeat, the executor's events, then its outcome in the end statement, a retry
 * after the backoff, or what an abort (a cancel, a shutdown, a lost lease) leaves to write. The
 * engine (`engine.ts`) claims the runs, schedules the executions and recovers the abandoned ones.
 */
export class RunExecutions {
  constructor(
    private readonly opts: { em: () => EntityManager; sql: SqlExecutor; log: Logger; bus: RunBus },
    private readonly workerId: string,
    private readonly leaseMs: number,
    private readonly retry: RetryPolicy,
    private readonly writer: EventWriter,
    private readonly executors: ReadonlyMap<RunKind, RunExecutor>,
    /** Wakes this process's claim loop. */
    private readonly kick: () => void,
  ) {}

  async executeRun(
    run: RunRecord & { recovered: boolean },
    controller: AbortController,
    live: LiveLog,
    local?: Record<string, unknown>,
  ): Promise<boolean> {
    const em = this.opts.em;
    const heartbeat = setInterval(
      () => {
        runStore
          .heartbeat(em(), run.id, this.workerId, this.leaseMs)
          .then((status) => {
            if (status === null) controller.abort('lease lost');
            else if (status === 'cancelled') controller.abort('cancelled');
          })
          .catch((err) => this.opts.log.warn({ err, runId: run.id }, 'run heartbeat failed'));
      },
      Math.max(50, Math.floor(this.leaseMs / 3)),
    );
    heartbeat.unref();
    const log = this.opts.log.child({ runId: run.id, kind: run.kind });
    try {
      if (run.recovered) {
        countLeaseExpiry(run.kind);
        log.warn({ attempt: run.attempts }, 'recovering a run whose worker died');
      }
      const executor = this.executors.get(run.kind);
      if (!executor) throw new Error(`No executor for run kind ${run.kind}`);
      const emit = async (type: string, payload: Record<string, unknown> = {}) => {
        if (live.gone || controller.signal.reason === 'cancelled') throw new RunGoneError(run.id);
        const ev = live.append(type, payload);
        this.writer.mark(live);
        // Backpressure: a producer far ahead of the database waits for a write.
        if (live.unwritten > 5000) await this.writer.flush();
        return ev.seq;
      };
      if (run.lastSeq === 0) await emit('run.started', { runId: run.id, sessionId: run.sessionId });
      const exec: RunExecution = {
        run,
        signal: controller.signal,
        emit,
        checkpoint: (state) => runStore.checkpoint(em(), run.id, this.workerId, state),
        em,
        local,
      };
      let outcome: RunOutcome;
      let threw = false;
      try {
        outcome = await executor.execute(exec);
      } catch (err) {
        if (controller.signal.aborted || err instanceof RunGoneError) {
          await this.afterAbort(run, live, controller.signal.reason);
          return false;
        }
        log.error({ err, attempt: run.attempts }, 'run executor failed');
        const reason = err instanceof Error ? err.message : String(err);
        // It threw rather than deciding the outcome: another execution may fare better.
        if (run.attempts < run.maxAttempts) {
          await this.retryLater(run, live, reason);
          return false;
        }
        outcome = { status: 'failed', error: givingUp(reason, run.attempts, run.maxAttempts) };
        threw = true;
      }
      if (
        controller.signal.aborted &&
        controller.signal.reason !== undefined &&
        outcome.status !== 'failed'
      ) {
        // The end statement will not carry the final writes: only what goes beside it.
        if (outcome.status === 'completed') await outcome.final?.beside?.();
        await this.afterAbort(run, live, controller.signal.reason);
        return false;
      }
      if (outcome.status === 'waiting') {
        const pending = await this.writer.drain(live);
        if (pending.length > 0) {
          await runStore.writeEvents(em(), this.workerId, pending, this.notification(run.id));
          live.markWritten((pending.at(-1) as RunEvent).seq);
        }
        await runStore.park(em(), run.id, this.workerId);
        // A result may have arrived before the lease was released.
        if (await runStore.unpark(em(), run.id)) this.kick();
      } else if (outcome.status === 'completed') {
        return await this.finish(live, 'completed', outcome.payload ?? {}, null, outcome.final);
      } else {
        const quiet = await this.finish(live, 'failed', { error: outcome.error }, outcome.error);
        if (threw) await this.tellFailed(run, outcome.error);
        return quiet;
      }
    } catch (err) {
      log.error({ err }, 'run execution failed');
    } finally {
      clearInterval(heartbeat);
    }
    return false;
  }

  private notification(runId: string) {
    return this.opts.bus.notification({ t: 'events', runIds: [runId] });
  }

  private async afterAbort(run: RunRecord, live: LiveLog, reason: unknown): Promise<void> {
    if (reason === 'cancelled' || live.gone === 'cancelled') {
      // Write what readers were shown, then the terminal event (the cancel left it to us).
      const pending = await this.writer.drain(live);
      const ev = await runStore.finishCancel(
        this.opts.em(),
        run.id,
        this.workerId,
        pending,
        this.notification(run.id),
      );
      if (ev) this.deliverWritten(live, ev);
      return;
    }
    if (reason !== 'shutdown') return; // lease lost: someone else owns the outcome
    const pending = await this.writer.drain(live);
    if (pending.length > 0) {
      await runStore.writeEvents(this.opts.em(), this.workerId, pending, this.notification(run.id));
      live.markWritten((pending.at(-1) as RunEvent).seq);
    }
    const current = await runStore.getRun(this.opts.em(), run.id);
    if (current?.status !== 'running' || current.leaseOwner !== this.workerId) return;
    if (current.attempts < current.maxAttempts) {
      // Let another process take it over at once (a shutdown is no fault of the run).
      await runStore.release(this.opts.em(), run.id, this.workerId, 0, null);
    } else {
      await this.finish(live, 'failed', { error: SHUTDOWN_ERROR }, SHUTDOWN_ERROR);
      await this.tellFailed(run, SHUTDOWN_ERROR);
    }
  }

  /**
   * Writes what readers were shown and releases the run for another execution after the
   * backoff of its attempts; a run cancelled meanwhile gets its `run.cancelled` instead.
   */
  private async retryLater(run: RunRecord, live: LiveLog, reason: string): Promise<void> {
    const em = this.opts.em();
    const pending = await this.writer.drain(live);
    if (pending.length > 0) {
      await runStore.writeEvents(em, this.workerId, pending, this.notification(run.id));
      live.markWritten((pending.at(-1) as RunEvent).seq);
    }
    const wait = backoffMs(this.retry, run.attempts);
    countRunRetry(run.kind);
    if (await runStore.release(em, run.id, this.workerId, wait, reason)) {
      this.opts.log.warn(
        { runId: run.id, attempt: run.attempts, retryInMs: wait },
        'run released for a retry',
      );
      return;
    }
    const ev = await runStore.finishCancel(em, run.id, this.workerId, [], this.notification(run.id));
    if (ev) this.deliverWritten(live, ev);
  }

  /** The executor's `failed` hook, for a run the engine failed on its behalf. */
  async tellFailed(run: RunRecord, error: string): Promise<void> {
    await this.executors
      .get(run.kind)
      ?.failed?.(run, error)
      .catch((err) => this.opts.log.warn({ err, runId: run.id }, 'run executor failed hook failed'));
  }

  /**
   * Ends the run in one statement: its unwritten events, the executor's final writes (its last
   * events, e.g. `message.completed`, and rows, e.g. the final assistant message; decision 0021),
   * the status change and the terminal event commit together (so the final message is
   * durable before the terminal event); what the executor writes beside it (the settlement)
   * runs in parallel. Then readers here are shown the last events and the terminal one.
   * True when the run ended here with no run of its serial key queued behind it.
   */
  private async finish(
    live: LiveLog,
    status: 'completed' | 'failed',
    payload: Record<string, unknown>,
    error: string | null = null,
    final?: FinalWrites,
  ): Promise<boolean> {
    const beside = final?.beside?.();
    let res: Awaited<ReturnType<typeof runStore.finishOwned>>;
    const last: RunEvent[] = [];
    try {
      const pending = await this.writer.drain(live);
      for (const e of final?.events ?? []) last.push(live.reserve(e.type, e.payload));
      // No NOTIFY in this statement: its flushed commit would hold PostgreSQL's NOTIFY lock,
      // which serialises every notifying commit (decision 0021). Readers elsewhere are
      // told with the node's next event batch.
      // A deadlock victim wrote nothing: run again (the balance row's lockers can form a
      // cycle with this statement's foreign-key checks, decision 0029).
      res = await retryTransient(() =>
        runStore.finishOwned(
          this.opts.sql,
          live.runId,
          this.workerId,
          status,
          payload,
          error,
          [...pending, ...last],
          final,
        ),
      );
    } finally {
      await beside;
    }
    if (res.owned) this.writer.notifyLater(live.runId);
    if (res.owned) for (const ev of last) this.deliverWritten(live, ev);
    if (res.terminal) {
      this.deliverWritten(live, res.terminal);
      return !res.queued;
    } else {
      // Cancelled meanwhile (the lease kept for us; `finishOwned` wrote the pending events), or
      // the lease was lost (nothing of ours is written any more).
      const cancelled = await runStore.finishCancel(
        this.opts.em(),
        live.runId,
        this.workerId,
        [],
        this.notification(live.runId),
      );
      if (cancelled) this.deliverWritten(live, cancelled);
    }
    return false;
  }

  /**
   * An event written by the end statement (or `run.cancelled`), shown to readers here after
   * everything before it (readers elsewhere learn of it from a NOTIFY: the node's next batch's
   * for the end statement, the statement's own for `run.cancelled`).
   */
  private deliverWritten(live: LiveLog, ev: RunEvent): void {
    live.markWritten(ev.seq - 1);
    live.appendWritten(ev);
  }
}
