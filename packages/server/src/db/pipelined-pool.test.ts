import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../test/harness.js';
import { PipelinedPool } from './pipelined-pool.js';
import { SqlPool } from './sql.js';

// The pipelined pool is the PostgreSQL server's (PGlite's socket shares one session and keeps
// the queued pool, `sql.test.ts`).
const onServer = !!process.env.DATABASE_URL;

let db: TestDatabase;
beforeAll(async () => {
  if (onServer) db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const newPool = (max: number) =>
  new PipelinedPool({ connectionString: db.databaseUrl, max, idleTimeoutMillis: 0 });
const q = (text: string, values: unknown[] = [], name = '') => ({ name, text, values });

describe.runIf(onServer)('PipelinedPool (the hot paths on the PostgreSQL server)', () => {
  it('sends the statements of one tick at once, in one write, without waiting for answers', async () => {
    const pool = newPool(1);
    try {
      await pool.query(q('select 1'));
      // Every socket write ends in one of these two (`_writev` for several corked chunks).
      const proto = net.Socket.prototype as unknown as Record<
        '_write' | '_writev',
        (...a: unknown[]) => void
      >;
      const writes = vi.spyOn(proto, '_writev');
      const write = vi.spyOn(proto, '_write');
      try {
        const got = await Promise.all(
          Array.from({ length: 20 }, (_, i) => pool.query(q('select $1::int * 2 as v', [i], 'pp_double'))),
        );
        expect(got.map((r) => r.rows[0].v)).toEqual(Array.from({ length: 20 }, (_, i) => i * 2));
        // Queued for a free connection, 20 statements would be 20 writes, each after the
        // previous answer.
        expect(writes.mock.calls.length + write.mock.calls.length).toBe(1);
      } finally {
        writes.mockRestore();
        write.mockRestore();
      }
    } finally {
      await pool.end();
    }
  });

  it('opens connections only while all are busy, up to max, and spreads statements over them', async () => {
    const pool = newPool(3);
    try {
      const pids = await Promise.all(
        Array.from({ length: 30 }, () => pool.query(q('select pg_backend_pid() as pid, pg_sleep(0.01)'))),
      );
      expect(new Set(pids.map((r) => r.rows[0].pid)).size).toBe(3);
      expect(pool.totalCount).toBe(3);
      // One at a time: the idle connection with the fewest statements serves each.
      const one = newPool(3);
      try {
        for (let i = 0; i < 5; i++) await one.query(q('select 1'));
        expect(one.totalCount).toBe(1);
      } finally {
        await one.end();
      }
    } finally {
      await pool.end();
    }
  });

  it('ends only the failing statement: the others sent with it on the same connection are answered', async () => {
    const pool = newPool(1);
    try {
      const [a, b, c, d] = await Promise.allSettled([
        pool.query(q('select 1 as v')),
        pool.query(q('select 1 / $1::int as v', [0])),
        pool.query(q('insert into no_such_table values (1)')),
        pool.query(q('select 4 as v')),
      ]);
      expect(a).toMatchObject({ status: 'fulfilled', value: { rows: [{ v: 1 }] } });
      expect(b).toMatchObject({ status: 'rejected', reason: { code: '22012' } });
      expect(c).toMatchObject({ status: 'rejected', reason: { code: '42P01' } });
      expect(d).toMatchObject({ status: 'fulfilled', value: { rows: [{ v: 4 }] } });
      expect(pool.totalCount).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it('fails the statements on a connection that breaks, then serves on a new one', async () => {
    const pool = newPool(1);
    const admin = new pg.Client({ connectionString: db.databaseUrl });
    await admin.connect();
    try {
      const pid = (await pool.query(q('select pg_backend_pid() as pid'))).rows[0].pid;
      const cut = pool.query(q('select pg_sleep(5)'));
      const behind = pool.query(q('select 2 as v'));
      // Both may reject while this test still awaits the terminate statement's own answer:
      // handled from the start, so that is not an unhandled rejection (the checks are below).
      cut.catch(() => undefined);
      behind.catch(() => undefined);
      await vi.waitFor(async () => {
        const r = await admin.query(
          `select 1 from pg_stat_activity where pid = $1 and query like '%pg_sleep(5)%'`,
          [pid],
        );
        expect(r.rowCount).toBe(1);
      });
      await admin.query('select pg_terminate_backend($1)', [pid]);
      await expect(cut).rejects.toBeInstanceOf(Error);
      await expect(behind).rejects.toBeInstanceOf(Error);
      const again = await pool.query(q('select pg_backend_pid() as pid'));
      expect(again.rows[0].pid).not.toBe(pid);
      expect(pool.totalCount).toBe(1);
    } finally {
      await admin.end();
      await pool.end();
    }
  });

  it('is what SqlPool uses on the server unless pipelining is off', async () => {
    for (const pipeline of [true, false]) {
      const sql = new SqlPool({ connectionString: db.databaseUrl, max: 2 }, 'server', { pipeline });
      try {
        const writes = vi.spyOn(PipelinedPool.prototype, 'query');
        try {
          const rows = await sql.execute<{ v: number }[]>('select ?::int + 1 as v', [41]);
          expect(rows).toEqual([{ v: 42 }]);
          expect(writes).toHaveBeenCalledTimes(pipeline ? 1 : 0);
        } finally {
          writes.mockRestore();
        }
      } finally {
        await sql.close();
      }
    }
  });

  it('refuses statements once ended', async () => {
    const pool = newPool(1);
    await pool.query(q('select 1'));
    await pool.end();
    expect(pool.totalCount).toBe(0);
    await expect(pool.query(q('select 1'))).rejects.toThrow('Pool is closed');
  });
});
