import { createHash } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import pg from 'pg';
import { CommitBarrier } from './commit-barrier.js';
import { PipelinedPool } from './pipelined-pool.js';

const { escapeLiteral } = pg;

/**
 * What a statement needs to run: the ORM's entity manager and the plain pool below both
 * provide it. Statements are written with `?` placeholders (the ORM's style).
 */
export interface SqlExecutor {
  execute<T = Record<string, unknown>[]>(sql: string, params?: unknown[]): Promise<T>;
  /**
   * Where present (the PostgreSQL server), resolves once every transaction this process saw
   * commit before the call is on disk: a statement may then commit with `synchronous_commit`
   * off and still be durable before its caller answers (`CommitBarrier`, decision 0032).
   */
  durable?: () => Promise<void>;
}

/** The entity manager as a `SqlExecutor` (statements join its transaction, if any). */
export const emExecutor = (em: EntityManager): SqlExecutor => ({
  execute: <T>(sql: string, params: unknown[] = []) => em.execute(sql, params) as Promise<T>,
});

const UNDEFINED_PREPARED_STATEMENT = '26000';
const DUPLICATE_PREPARED_STATEMENT = '42P05';

interface Prepared {
  name: string;
  text: string;
}

/** `?` placeholders to `$1, $2, …` (the statements here carry no `?` inside literals). */
export function toPositional(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}

/** One value as an SQL literal: numbers parenthesised (never `--`), strings escaped by `pg`. */
export function sqlLiteral(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Error(`Cannot inline ${v}`);
    return `(${v})`;
  }
  if (typeof v === 'bigint') return `(${v})`;
  if (typeof v === 'boolean') return v ? 'TRUE' : 'FALSE';
  if (v instanceof Date) return `'${v.toISOString()}'`;
  if (typeof v === 'string') return escapeLiteral(v);
  return escapeLiteral(JSON.stringify(v));
}

/**
 * The commit barrier's statement (decision 0032): a transactional logical message assigns
 * the transaction an id and writes WAL before its commit record, so PostgreSQL commits it
 * synchronously and flushes the WAL up to that record, past every commit made before it. (A
 * transaction that only takes an id, `select txid_current()`, writes no WAL before its commit
 * record and is committed asynchronously: it flushes nothing.) Nothing decodes the
 * message: no replication slot here asks for messages, and its prefix says what it is.
 */
export const COMMIT_BARRIER_SQL = "select pg_logical_emit_message(true, 'ai-suite.commit-barrier', '')";

/** Whether the role may run the barrier (EXECUTE is granted to PUBLIC unless an operator revoked it). */
export const COMMIT_BARRIER_ALLOWED_SQL =
  "select has_function_privilege('pg_logical_emit_message(boolean, text, text)', 'execute') as allowed";

/**
 * A plain `pg` pool beside the ORM, for the request hot path (`POST /chat`): each statement
 * is prepared once and then only executed, without the ORM's per-call machinery (MikroORM +
 * knex cost ~1 ms of CPU per statement under load, bench/README.md). Never used inside an
 * ORM transaction: it is a different connection.
 *
 * - `server` (PostgreSQL): named statements of the extended protocol, prepared once per
 *   connection, with generic plans (`plan_cache_mode`): these are key lookups whose best plan
 *   never depends on the values, and planning the CTEs costs ~0.5 ms per execution. By
 *   default the connections pipeline (`PipelinedPool`): a statement goes out at once on the
 *   least busy connection instead of waiting in the process for a free one (decision 0030).
 * - `embedded` (PGlite): its socket server shares ONE session between all connections and
 *   enters the WASM engine once per protocol message; parsing and planning a CTE there costs
 *   ~2.5 ms. So statements are prepared in that shared session with SQL `PREPARE` and run as
 *   `EXECUTE name(literals…)`: one simple-protocol message, no planning (decision 0014).
 */
export class SqlPool implements SqlExecutor {
  /** Statements queued in the process for a free connection (PGlite, or pipelining off). */
  private readonly pool: pg.Pool | undefined;
  /** Statements pipelined on the least busy connection (the server, by default). */
  private readonly pipelined: PipelinedPool | undefined;
  private readonly prepared = new Map<string, Prepared>();
  /** Group commit for statements that commit asynchronously (the server only; PGlite commits each in turn). */
  readonly barrier: CommitBarrier | undefined;
  readonly durable: (() => Promise<void>) | undefined;

  /** Connections in use, idle, and statements waiting for one (`aisuite_db_pool_connections`). */
  stats(): { used: number; idle: number; pending: number } {
    if (this.pipelined) return this.pipelined.stats();
    const p = this.pool;
    if (!p) return { used: 0, idle: 0, pending: 0 };
    return { used: p.totalCount - p.idleCount, idle: p.idleCount, pending: p.waitingCount };
  }

  constructor(
    config: pg.PoolConfig,
    private readonly mode: 'server' | 'embedded',
    opts: { pipeline?: boolean; commitBarrier?: boolean } = {},
  ) {
    if (mode === 'server' && opts.commitBarrier) {
      const barrier = new CommitBarrier(() => this.execute(COMMIT_BARRIER_SQL));
      this.barrier = barrier;
      this.durable = () => barrier.wait();
    }
    if (mode === 'server' && (opts.pipeline ?? true)) {
      // Connections stay open once made, and TCP keep-alive finds one a network device dropped
      // (as for the pool below); a statement goes out at once on the least busy connection
      // (decision 0030).
      const { max, idleTimeoutMillis, ...client } = config;
      this.pipelined = new PipelinedPool({
        ...client,
        options: '-c plan_cache_mode=force_generic_plan',
        keepAlive: true,
        max: max ?? 10,
        idleTimeoutMillis: idleTimeoutMillis ?? 0,
      });
      return;
    }
    this.pool = new pg.Pool({
      ...config,
      ...(mode === 'server' ? { options: '-c plan_cache_mode=force_generic_plan' } : {}),
      // Connections stay open once made (a fixed-size pool, as HikariCP recommends): `pg`
      // closes an idle one after 10 s by default, and the first burst after a quiet spell then
      // paid a new backend and the preparation of every statement it ran on each connection —
      // 20–60 ms per statement instead of ~1 (decision 0030). TCP keep-alive finds one a
      // network device dropped; the pool replaces a connection that errors.
      idleTimeoutMillis: config.idleTimeoutMillis ?? 0,
      keepAlive: true,
      allowExitOnIdle: true,
    });
    // An idle client losing its connection must not take the process down; the next query
    // gets a fresh one.
    this.pool.on('error', () => {});
  }

  private statement(sql: string): Prepared {
    let p = this.prepared.get(sql);
    if (!p) {
      p = { name: `q_${createHash('sha1').update(sql).digest('hex').slice(0, 16)}`, text: toPositional(sql) };
      this.prepared.set(sql, p);
    }
    return p;
  }

  async execute<T = Record<string, unknown>[]>(sql: string, params: unknown[] = []): Promise<T> {
    const { name, text } = this.statement(sql);
    if (this.pipelined) return (await this.pipelined.query({ name, text, values: params })).rows as T;
    const pool = this.pool as pg.Pool;
    if (this.mode === 'server') return (await pool.query({ name, text, values: params })).rows as T;
    const run = `EXECUTE ${name}${params.length > 0 ? `(${params.map(sqlLiteral).join(', ')})` : ''}`;
    try {
      return (await pool.query(run)).rows as T;
    } catch (err) {
      if ((err as { code?: string }).code !== UNDEFINED_PREPARED_STATEMENT) throw err;
    }
    // First use in this session (or a new session after a restart): prepare, then run. Two
    // connections racing here: the second PREPARE finds the name taken, which is fine.
    await pool.query(`PREPARE ${name} AS ${text}`).catch((err: { code?: string }) => {
      if (err.code !== DUPLICATE_PREPARED_STATEMENT) throw err;
    });
    return (await pool.query(run)).rows as T;
  }

  /** Connections open now (idle or in use). */
  get connections(): number {
    return this.pipelined?.totalCount ?? this.pool?.totalCount ?? 0;
  }

  async close(): Promise<void> {
    await this.pipelined?.end();
    await this.pool?.end();
  }
}
