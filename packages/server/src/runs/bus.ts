import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { EntityManager } from '@mikro-orm/postgresql';
import pg from 'pg';
import type { Logger } from 'pino';

export type BusMessage =
  | { t: 'event'; runId: string; seq: number }
  /** A batch of events of these runs was written (one NOTIFY per batch per node). */
  | { t: 'events'; runIds: string[] }
  | { t: 'cancel'; runId: string }
  | { t: 'wake' };

const CHANNEL = 'aisuite_runs';

/**
 * A `pg_notify` channel and payload for `msg` sent by a process without a bus of its own (the
 * operator CLI): every server process delivers it (PostgreSQL server only).
 */
export function busNotification(msg: BusMessage): { channel: string; payload: string } {
  return { channel: CHANNEL, payload: JSON.stringify({ from: `cli-${randomUUID()}`, msg }) };
}

/**
 * Tells interested parties that something happened to a run: a new event (stream readers
 * tail on it), a cancel (the worker holding the run aborts), or work to claim (idle workers
 * wake). Delivery is a hint: readers and workers also poll, so a lost message only delays.
 */
export class RunBus {
  private readonly local = new EventEmitter();
  private readonly nodeId = randomUUID();
  private client: pg.Client | undefined;
  private closed = false;

  constructor(private readonly opts: { databaseUrl?: string; log: Logger; em: () => EntityManager }) {
    this.local.setMaxListeners(0);
  }

  /** Across nodes only on the PostgreSQL server; PGlite does not deliver NOTIFY across connections. */
  get distributed(): boolean {
    return this.opts.databaseUrl !== undefined;
  }

  async start(): Promise<void> {
    if (!this.distributed) return;
    await this.connect();
  }

  private async connect(): Promise<void> {
    // A dedicated client: LISTEN holds its connection for the life of the process.
    const client = new pg.Client({ connectionString: this.opts.databaseUrl });
    client.on('notification', (n) => {
      if (!n.payload) return;
      try {
        const { from, msg } = JSON.parse(n.payload) as { from: string; msg: BusMessage };
        if (from !== this.nodeId) this.deliver(msg);
      } catch {
        /* foreign payload */
      }
    });
    client.on('error', (err) => {
      this.opts.log.warn({ err }, 'run bus connection lost; reconnecting');
      this.client = undefined;
      client.end().catch(() => {});
      if (!this.closed) setTimeout(() => this.connect().catch(() => {}), 1000).unref();
    });
    await client.connect();
    await client.query(`listen ${CHANNEL}`);
    this.client = client;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.local.removeAllListeners();
    await this.client?.end().catch(() => {});
    this.client = undefined;
  }

  /**
   * The channel and payload of `msg` for a `pg_notify` made inside another statement (so the
   * notification costs no transaction of its own); undefined on PGlite. Local listeners are
   * not told: the caller delivers from memory.
   */
  notification(msg: BusMessage): { channel: string; payload: string } | undefined {
    if (!this.distributed || this.closed) return undefined;
    let payload = JSON.stringify({ from: this.nodeId, msg });
    // NOTIFY payloads are limited to 8000 bytes: a huge batch wakes every reader instead.
    if (payload.length > 7900 && msg.t === 'events') {
      payload = JSON.stringify({ from: this.nodeId, msg: { t: 'events', runIds: [] } });
    }
    return { channel: CHANNEL, payload };
  }

  /** Tells this process's readers of `runId` to look again (no NOTIFY). */
  localEvent(runId: string): void {
    this.local.emit(`event:${runId}`);
  }

  async publish(msg: BusMessage): Promise<void> {
    this.deliver(msg);
    if (!this.distributed || this.closed) return;
    try {
      await this.opts
        .em()
        .execute('select pg_notify(?, ?)', [CHANNEL, JSON.stringify({ from: this.nodeId, msg })]);
    } catch (err) {
      this.opts.log.warn({ err }, 'run bus notify failed');
    }
  }

  private deliver(msg: BusMessage): void {
    if (msg.t === 'wake') this.local.emit('wake');
    else if (msg.t === 'events') {
      if (msg.runIds.length === 0) this.local.emit('event:*');
      for (const id of msg.runIds) this.local.emit(`event:${id}`);
    } else this.local.emit(`${msg.t}:${msg.runId}`, msg);
  }

  onEvent(runId: string, fn: () => void): () => void {
    this.local.on(`event:${runId}`, fn);
    this.local.on('event:*', fn);
    return () => {
      this.local.off(`event:${runId}`, fn);
      this.local.off('event:*', fn);
    };
  }

  onCancel(runId: string, fn: () => void): () => void {
    this.local.on(`cancel:${runId}`, fn);
    return () => this.local.off(`cancel:${runId}`, fn);
  }

  onWake(fn: () => void): () => void {
    this.local.on('wake', fn);
    return () => this.local.off('wake', fn);
  }
}
