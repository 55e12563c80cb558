import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { emExecutor, type SqlExecutor } from '../db/sql.js';
import type { BusMessage } from './bus.js';
import { runStore } from './store.js';
import type { RunEvent, RunStatus } from './types.js';

/** Events kept in memory once written, per run, for readers that fall a little behind. */
const KEEP_WRITTEN = 2000;

/**
 * The event log of a run while this process executes it (docs/run-engine.md, "Streams").
 * The worker assigns sequences in memory (it holds the lease, so it is the only writer),
 * hands each event to this process's readers at once, and the node's `EventWriter` writes
 * them to `run_events` in batches. `written` is the durable horizon: a reader that starts
 * below the first event held here replays from the database, then continues from memory.
 */
export class LiveLog {
  readonly events: RunEvent[] = [];
  /** Sequence of `events[0]` (or of the next event while empty). */
  firstSeq: number;
  nextSeq: number;
  /** Highest sequence readers may see. */
  delivered: number;
  /** Highest sequence handed to the writer / known durable. */
  taken: number;
  written: number;
  /**
   * Set by `tool_call.pending`: the integrator may answer as soon as it sees that event, and
   * its answer is appended by whoever receives it, so nothing from here on is shown or written
   * before the run is parked and its lease released (the sequences stay this worker's alone).
   */
  heldFrom: number | undefined;
  /** Why this worker may not go on: the run was cancelled, or its lease lost. */
  gone: 'cancelled' | 'lost' | undefined;
  ended = false;
  private waiters = new Set<() => void>();

  constructor(
    readonly runId: string,
    lastSeq: number,
    readonly onGone: (why: 'cancelled' | 'lost') => void,
  ) {
    this.firstSeq = lastSeq + 1;
    this.nextSeq = lastSeq + 1;
    this.delivered = lastSeq;
    this.taken = lastSeq;
    this.written = lastSeq;
  }

  append(type: string, payload: Record<string, unknown>): RunEvent {
    const ev: RunEvent = { runId: this.runId, seq: this.nextSeq++, type, payload, createdAt: new Date() };
    this.events.push(ev);
    if (type === 'tool_call.pending' && this.heldFrom === undefined) this.heldFrom = ev.seq;
    if (this.heldFrom === undefined) {
      this.delivered = ev.seq;
      this.wake();
    }
    return ev;
  }

  /**
   * The next sequence for an event the end statement writes (decision 0021), neither
   * shown nor handed to the writer: `appendWritten` shows it once that statement committed.
   */
  reserve(type: string, payload: Record<string, unknown>): RunEvent {
    return { runId: this.runId, seq: this.nextSeq++, type, payload, createdAt: new Date() };
  }

  /** An event written by the end statement (the terminal event), after everything here. */
  appendWritten(ev: RunEvent): void {
    this.events.push(ev);
    this.nextSeq = ev.seq + 1;
    this.taken = this.written = ev.seq;
    this.delivered = ev.seq;
    this.wake();
  }

  /** Events readers may see after `afterSeq`. */
  since(afterSeq: number): RunEvent[] {
    if (afterSeq >= this.delivered) return [];
    const from = Math.max(0, afterSeq + 1 - this.firstSeq);
    return this.events.slice(from, this.delivered - this.firstSeq + 1);
  }

  /** Events the writer may take now (not held). Marks them taken. */
  takeWritable(all = false): RunEvent[] {
    const limit = all || this.heldFrom === undefined ? this.nextSeq - 1 : this.heldFrom - 1;
    if (limit <= this.taken) return [];
    const out = this.events.slice(this.taken + 1 - this.firstSeq, limit - this.firstSeq + 1);
    this.taken = limit;
    return out;
  }

  markWritten(upTo: number): void {
    this.written = Math.max(this.written, upTo);
    // Memory stays bounded for long runs: drop the oldest written events.
    const excess = this.written - this.firstSeq + 1 - KEEP_WRITTEN;
    if (excess > 0) {
      this.events.splice(0, excess);
      this.firstSeq += excess;
    }
  }

  /** A write failed: take its events again next time. */
  untake(): void {
    this.taken = this.written;
  }

  get unwritten(): number {
    return this.nextSeq - 1 - this.written;
  }

  /** The execution is over: show what was held (now written), wake readers. */
  end(): void {
    this.heldFrom = undefined;
    this.delivered = Math.min(this.written, this.nextSeq - 1);
    this.ended = true;
    this.wake();
  }

  /** Calls `fn` once, on the next event readers may see (or the end). */
  onNext(fn: () => void): void {
    this.waiters.add(fn);
  }

  /** Forgets a `fn` given to `onNext` that is no longer waiting. */
  unwait(fn: () => void): void {
    this.waiters.delete(fn);
  }

  private wake(): void {
    const ws = [...this.waiters];
    this.waiters.clear();
    for (const w of ws) w();
  }
}

export interface EventWriterOptions {
  em: () => EntityManager;
  /** The plain pool: batches are written there when given (decision 0021). */
  sql?: SqlExecutor;
  log: Logger;
  owner: string;
  /** Longest time an event waits before its batch is written (ms). */
  flushMs: number;
  /** A batch is written at once when this many events wait. */
  maxBatch: number;
  notification: (msg: BusMessage) => { channel: string; payload: string } | undefined;
}

/**
 * Writes the events of every run this process executes: whatever gathered over `flushMs` (or
 * `maxBatch` events) goes out in one statement, one multi-row insert and one NOTIFY for all
 * runs. One write at a time; a failed write is retried with the next batch.
 */
export class EventWriter {
  private dirty = new Set<LiveLog>();
  /** Runs whose readers on other processes are told with the next batch's NOTIFY. */
  private toNotify = new Set<string>();
  private queued = 0;
  private timer: NodeJS.Timeout | undefined;
  private chain: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(private readonly opts: EventWriterOptions) {}

  mark(log: LiveLog): void {
    this.dirty.add(log);
    this.queued++;
    if (this.queued >= this.opts.maxBatch) this.flush();
    else if (!this.timer && !this.closed) {
      this.timer = setTimeout(() => this.flush(), this.opts.flushMs);
    }
  }

  /**
   * Tells readers on other processes to look at `runId` again with the next batch's NOTIFY
   * (within `flushMs`; a NOTIFY of its own when no event waits): for a statement that wrote a
   * run's last events without a NOTIFY (decision 0021). No-op without NOTIFY (PGlite).
   */
  notifyLater(runId: string): void {
    if (!this.opts.notification({ t: 'events', runIds: [runId] })) return;
    this.toNotify.add(runId);
    if (!this.timer && !this.closed) this.timer = setTimeout(() => this.flush(), this.opts.flushMs);
  }

  /** Writes what waits now (after any write in flight). */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.chain = this.chain.then(() => this.writeBatch());
    return this.chain;
  }

  /**
   * Takes a run out of the batching: waits for the write in flight, then returns the events
   * of `log` not yet written (held ones included) for the caller's own transaction.
   */
  async drain(log: LiveLog): Promise<RunEvent[]> {
    await this.chain;
    this.dirty.delete(log);
    return log.takeWritable(true);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
  }

  private async writeBatch(): Promise<void> {
    this.queued = 0;
    const batch: { log: LiveLog; upTo: number }[] = [];
    const events: RunEvent[] = [];
    for (const log of this.dirty) {
      const evs = log.takeWritable();
      if (evs.length === 0) continue;
      batch.push({ log, upTo: (evs.at(-1) as RunEvent).seq });
      events.push(...evs);
    }
    this.dirty.clear();
    const told = [...this.toNotify];
    this.toNotify.clear();
    if (events.length === 0) {
      if (told.length > 0) await this.notifyOnly(told);
      return;
    }
    const runIds = [...new Set([...batch.map((b) => b.log.runId), ...told])];
    try {
      const statuses = await runStore.writeEvents(
        this.opts.sql ?? this.opts.em(),
        this.opts.owner,
        events,
        this.opts.notification({ t: 'events', runIds }),
      );
      for (const { log, upTo } of batch) this.settle(log, upTo, statuses.get(log.runId));
    } catch (err) {
      for (const id of told) this.toNotify.add(id);
      if (batch.length > 1) {
        // One bad run (deleted meanwhile) must not hold back the others: one run per statement.
        this.opts.log.warn({ err }, 'run event batch failed; writing run by run');
        for (const { log } of batch) log.untake();
        for (const { log } of batch) await this.writeOne(log);
        return;
      }
      this.opts.log.warn({ err }, 'run event write failed; retrying');
      for (const { log } of batch) {
        log.untake();
        this.dirty.add(log);
      }
      if (!this.closed && !this.timer) this.timer = setTimeout(() => this.flush(), this.opts.flushMs * 4);
    }
  }

  /** A NOTIFY alone (its transaction writes nothing: committed without waiting for a flush). */
  private async notifyOnly(runIds: string[]): Promise<void> {
    const n = this.opts.notification({ t: 'events', runIds });
    if (!n) return;
    try {
      await (this.opts.sql ?? emExecutor(this.opts.em())).execute(
        `select set_config('synchronous_commit', 'off', true), pg_notify(?::text, ?::text)`,
        [n.channel, n.payload],
      );
    } catch (err) {
      this.opts.log.warn({ err }, 'run events notify failed');
    }
  }

  private async writeOne(log: LiveLog): Promise<void> {
    const evs = log.takeWritable();
    if (evs.length === 0) return;
    try {
      const statuses = await runStore.writeEvents(
        this.opts.sql ?? this.opts.em(),
        this.opts.owner,
        evs,
        this.opts.notification({ t: 'events', runIds: [log.runId] }),
      );
      this.settle(log, (evs.at(-1) as RunEvent).seq, statuses.get(log.runId));
    } catch (err) {
      this.opts.log.error({ err, runId: log.runId }, 'run events could not be written; stopping the run');
      log.untake();
      this.dirty.delete(log);
      log.gone = 'lost';
      log.onGone('lost');
    }
  }

  private settle(log: LiveLog, upTo: number, status: RunStatus | undefined): void {
    if (status === undefined) {
      // The lease is no longer ours (another worker recovered the run): stop producing.
      log.gone ??= 'lost';
      log.onGone('lost');
      return;
    }
    log.markWritten(upTo);
    if (status === 'cancelled') {
      log.gone ??= 'cancelled';
      log.onGone('cancelled');
    }
  }
}
