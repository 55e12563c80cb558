import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../test/harness.js';
import { SqlPool, sqlLiteral } from './sql.js';

let db: TestDatabase;
let pool: SqlPool;
const newPool = (extra: { idleTimeoutMillis?: number } = {}) =>
  db.embedded
    ? new SqlPool(
        {
          host: db.embedded.socketDir,
          port: db.embedded.port,
          user: 'postgres',
          database: 'postgres',
          max: 4,
          ...extra,
        },
        'embedded',
      )
    : new SqlPool({ connectionString: db.databaseUrl, max: 4, ...extra }, 'server');
beforeAll(async () => {
  db = await createTestDatabase();
  pool = newPool();
});
afterAll(async () => {
  await pool?.close();
  await db?.drop();
});

describe('SqlPool (the hot path pool)', () => {
  it('round-trips hostile strings, negative numbers, booleans, nulls, dates and JSON as values', async () => {
    const nasty = "a'b\\c -- ; drop table x; $$ ' E'";
    const when = new Date('2026-02-03T04:05:06.789Z');
    const [row] = await pool.execute<
      { s: string; n: string; b: boolean; z: string | null; d: Date; j: { k: string } }[]
    >('select ?::text as s, 1 - ? as n, ?::boolean as b, ?::text as z, ?::timestamptz as d, ?::jsonb as j', [
      nasty,
      -5,
      true,
      null,
      when,
      JSON.stringify({ k: nasty }),
    ]);
    expect(row).toEqual({ s: nasty, n: 6, b: true, z: null, d: when, j: { k: nasty } });
  });

  it('prepares a statement once even when many connections use it first at the same time', async () => {
    const sql = 'select ?::int * 2 as v';
    const got = await Promise.all(
      Array.from({ length: 12 }, (_, i) => pool.execute<{ v: number }[]>(sql, [i])),
    );
    expect(got.map((r) => r[0]?.v)).toEqual(Array.from({ length: 12 }, (_, i) => i * 2));
  });

  it('answers a statement error as the error, not as a missing statement', async () => {
    await expect(pool.execute('select 1 / ?::int as v', [0])).rejects.toMatchObject({ code: '22012' });
  });

  it('keeps its connections through a quiet spell (pg closes idle ones after 10 s by default)', async () => {
    // Fake timers from before the connections are made: the idle timer each release arms is
    // then one of them. A minute passes; the warm connections are still there, and still work.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const warm = newPool();
    const short = newPool({ idleTimeoutMillis: 1000 });
    try {
      await Promise.all([0, 1, 2].map((i) => warm.execute('select ?::int as v, pg_sleep(0.01)', [i])));
      await Promise.all([0, 1, 2].map((i) => short.execute('select ?::int as v, pg_sleep(0.01)', [i])));
      // Three on the server; the embedded database answers one at a time, so maybe fewer.
      const open = warm.connections;
      expect(open).toBeGreaterThan(0);
      expect(short.connections).toBeGreaterThan(0);
      await vi.advanceTimersByTimeAsync(60_000);
      expect(warm.connections).toBe(open);
      // The setting is honoured when given (the check can fail).
      expect(short.connections).toBe(0);
    } finally {
      vi.useRealTimers();
      await warm.close();
      await short.close();
    }
    await expect(pool.execute<{ v: number }[]>('select ?::int as v', [7])).resolves.toEqual([{ v: 7 }]);
  });

  it('writes literals that cannot escape their place', () => {
    expect(sqlLiteral(-5)).toBe('(-5)');
    expect(sqlLiteral("it's")).toBe("'it''s'");
    expect(sqlLiteral('back\\slash')).toBe(" E'back\\\\slash'");
    expect(() => sqlLiteral(Number.NaN)).toThrow();
  });
});
