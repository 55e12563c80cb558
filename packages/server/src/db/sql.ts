import { createHash } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import pg from 'pg';

const { escapeLiteral } = pg;

/**
 * What a statement needs to run: the ORM's entity manager and the plain pool below both
 * provide it. Statements are written with `?` placeholders (the ORM's style).
 */
export interface SqlExecutor {
  execute<T = Record<string, unknown>[]>(sql: string, params?: unknown[]): Promise<T>;
}

/** The entity manager as a `SqlExecutor` (statements join its transaction, if any). */
export const emExecutor = (em: EntityManager): SqlExecutor => ({
  execute: <T>(sql: string, params: unknown[] = []) => em.execute(sql, params) as Promise<T>,
});

interface Prepared {
  name: string | undefined;
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

/** `?` placeholders replaced by the values as literals (for the simple query protocol). */
export function inlineParams(sql: string, params: unknown[]): string {
  let i = 0;
  const out = sql.replace(/\?/g, () => {
    if (i >= params.length) throw new Error('Fewer parameters than placeholders');
    return sqlLiteral(params[i++]);
  });
  if (i !== params.length) throw new Error('More parameters than placeholders');
  return out;
}

/**
 * A plain `pg` pool beside the ORM, for the request hot path (`POST /chat`): each statement
 * is converted once, prepared once per connection (named statements, on a PostgreSQL server)
 * and run without the ORM's per-call machinery (MikroORM + knex cost ~1 ms of CPU per
 * statement under load, bench/README.md). Never used inside an ORM transaction: it is a
 * different connection.
 */
export class SqlPool implements SqlExecutor {
  private readonly pool: pg.Pool;
  private readonly prepared = new Map<string, Prepared>();

  /**
   * `prepare`: use named (server-side prepared) statements. Only on a PostgreSQL server: the
   * embedded PGlite serves every socket connection from ONE session, where two connections
   * preparing the same name collide.
   */
  constructor(
    config: pg.PoolConfig,
    private readonly prepare: boolean,
  ) {
    this.pool = new pg.Pool({
      ...config,
      // The hot-path statements are key lookups whose best plan never depends on the values:
      // a generic plan spares ~0.5 ms of planning per execution (custom plans are re-planned).
      ...(prepare ? { options: '-c plan_cache_mode=force_generic_plan' } : {}),
      allowExitOnIdle: true,
    });
    // An idle client losing its connection must not take the process down; the next query
    // gets a fresh one.
    this.pool.on('error', () => {});
  }

  private statement(sql: string): Prepared {
    let p = this.prepared.get(sql);
    if (!p) {
      const name = this.prepare
        ? `q_${createHash('sha1').update(sql).digest('hex').slice(0, 16)}`
        : undefined;
      p = { name, text: toPositional(sql) };
      this.prepared.set(sql, p);
    }
    return p;
  }

  async execute<T = Record<string, unknown>[]>(sql: string, params: unknown[] = []): Promise<T> {
    if (!this.prepare) {
      // PGlite: one simple-protocol message instead of five extended-protocol ones (its socket
      // server enters the WASM engine once per protocol message).
      const res = await this.pool.query(inlineParams(sql, params));
      return res.rows as T;
    }
    const { name, text } = this.statement(sql);
    const res = await this.pool.query({ name, text, values: params });
    return res.rows as T;
  }

  close(): Promise<void> {
    return this.pool.end();
  }
}
