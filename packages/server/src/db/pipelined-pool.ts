import type { Socket } from 'node:net';
import pg from 'pg';

/** One connection of a `PipelinedPool` and the statements it has on the wire. */
interface Lane {
  client: pg.Client;
  /** Statements sent and not yet answered. */
  inflight: number;
  /** Resolves once connected; rejects with the connection error. */
  ready: Promise<void>;
  dead: boolean;
  /** Corked until the end of this tick: the statements of one tick leave in one write. */
  corked: boolean;
  /** Closes the connection after `idleTimeoutMillis` without a statement. */
  idle: NodeJS.Timeout | undefined;
}

export interface PipelinedPoolConfig extends pg.ClientConfig {
  /** Connections at most (each is one backend). */
  max: number;
  /** Closes a connection this long without a statement (0: never). */
  idleTimeoutMillis: number;
}

/** The connection's socket (`pg.Client` keeps it as `connection.stream`). */
const socketOf = (lane: Lane) =>
  (lane.client as unknown as { connection: { stream: Socket } }).connection.stream;

/**
 * Connections that pipeline their statements (decision 0030), on `pg`'s pipeline mode: a
 * statement goes out at once on the connection with the fewest statements on the wire, a new
 * one opened while fewer than `max` are and all are busy, instead of waiting in the process for
 * a free connection. Each statement is its own implicit transaction (a Sync after each), so
 * an error ends that statement only. The statements issued in one tick of the event loop leave
 * in one socket write per connection.
 *
 * For single statements only: nothing holds a connection across statements (no transaction
 * spans two calls), and nothing reads a cursor. A statement waiting on a lock delays those
 * sent after it on its connection; the least busy connection is chosen so that this stays rare.
 */
export class PipelinedPool {
  private readonly lanes: Lane[] = [];
  private closed = false;

  constructor(private readonly config: PipelinedPoolConfig) {}

  async query(q: { name: string; text: string; values: unknown[] }): Promise<pg.QueryResult> {
    if (this.closed) throw new Error('Pool is closed');
    const lane = this.pick();
    if (lane.idle) clearTimeout(lane.idle);
    lane.idle = undefined;
    if (lane.inflight++ === 0) socketOf(lane).ref();
    try {
      await lane.ready;
      if (lane.dead) throw new Error('Connection terminated');
      this.cork(lane);
      return await lane.client.query(q);
    } finally {
      lane.inflight--;
      if (lane.inflight === 0 && !lane.dead) this.rest(lane);
    }
  }

  /** Connections with statements on the wire (used) and without (idle); none ever waits. */
  stats(): { used: number; idle: number; pending: number } {
    let used = 0;
    for (const l of this.lanes) if (l.inflight > 0) used++;
    return { used, idle: this.lanes.length - used, pending: 0 };
  }

  /** The least busy open connection, or a new one while fewer than `max` are open and all are busy. */
  private pick(): Lane {
    let best: Lane | undefined;
    for (const l of this.lanes) if (!best || l.inflight < best.inflight) best = l;
    if (best && (best.inflight === 0 || this.lanes.length >= this.config.max)) return best;
    return this.open();
  }

  private open(): Lane {
    const { max: _max, idleTimeoutMillis: _idle, ...config } = this.config;
    const client = new pg.Client({ ...config, pipeline: true } as pg.ClientConfig);
    const lane: Lane = {
      client,
      inflight: 0,
      dead: false,
      corked: false,
      idle: undefined,
      ready: Promise.resolve(),
    };
    // A broken connection fails the statements on it (pg rejects them); the next statement
    // that finds every remaining connection busy opens another.
    client.on('error', () => this.drop(lane));
    client.on('end', () => this.drop(lane));
    lane.ready = client.connect().then(
      () => undefined,
      (err: unknown) => {
        this.drop(lane);
        throw err;
      },
    );
    // Each caller awaits `ready` and sees its rejection; none is left unhandled here.
    lane.ready.catch(() => undefined);
    this.lanes.push(lane);
    return lane;
  }

  private drop(lane: Lane): void {
    if (lane.dead) return;
    lane.dead = true;
    if (lane.idle) clearTimeout(lane.idle);
    const i = this.lanes.indexOf(lane);
    if (i >= 0) this.lanes.splice(i, 1);
  }

  /** An idle connection keeps no process alive (as `pg.Pool`'s `allowExitOnIdle`) and may close. */
  private rest(lane: Lane): void {
    socketOf(lane).unref();
    if (this.config.idleTimeoutMillis > 0) {
      lane.idle = setTimeout(() => {
        if (lane.inflight > 0) return;
        this.drop(lane);
        lane.client.end().catch(() => undefined);
      }, this.config.idleTimeoutMillis);
      lane.idle.unref();
    }
  }

  private cork(lane: Lane): void {
    if (lane.corked) return;
    const socket = socketOf(lane);
    lane.corked = true;
    socket.cork();
    process.nextTick(() => {
      lane.corked = false;
      socket.uncork();
    });
  }

  /** Connections open now. */
  get totalCount(): number {
    return this.lanes.length;
  }

  async end(): Promise<void> {
    this.closed = true;
    await Promise.all(
      this.lanes.splice(0).map(async (lane) => {
        lane.dead = true;
        if (lane.idle) clearTimeout(lane.idle);
        await lane.ready.catch(() => undefined);
        await lane.client.end().catch(() => undefined);
      }),
    );
  }
}
