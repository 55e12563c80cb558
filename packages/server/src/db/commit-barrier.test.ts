import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../test/harness.js';
import { CommitBarrier } from './commit-barrier.js';
import { COMMIT_BARRIER_ALLOWED_SQL, SqlPool } from './sql.js';

const onServer = !!process.env.DATABASE_URL;
let db: TestDatabase | undefined;
beforeAll(async () => {
  if (onServer) db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** A barrier whose statements the test answers one by one. */
function controlled() {
  const pending: { resolve: () => void; reject: (e: Error) => void }[] = [];
  const barrier = new CommitBarrier(
    () =>
      new Promise<void>((resolve, reject) => {
        pending.push({ resolve, reject });
      }),
  );
  return { barrier, pending };
}

const settled = async (p: Promise<unknown>) => {
  let state = 'pending';
  p.then(
    () => {
      state = 'resolved';
    },
    () => {
      state = 'rejected';
    },
  );
  await new Promise((r) => setImmediate(r));
  return state;
};

describe('CommitBarrier (decision 0032)', () => {
  it('answers a caller only with a barrier sent after its call; callers meanwhile share the next one', async () => {
    const { barrier, pending } = controlled();
    const first = barrier.wait();
    expect(barrier.count).toBe(1);
    // Asked while the first is on its way: the first may not cover them.
    const later = [barrier.wait(), barrier.wait(), barrier.wait()];
    expect(barrier.count).toBe(1);
    pending[0]?.resolve();
    expect(await settled(first)).toBe('resolved');
    expect(await settled(later[0] as Promise<void>)).toBe('pending');
    // The second barrier went out when the first answered, for all three.
    expect(barrier.count).toBe(2);
    pending[1]?.resolve();
    for (const p of later) expect(await settled(p)).toBe('resolved');
    // Nothing in flight: the next caller sends at once.
    const again = barrier.wait();
    expect(barrier.count).toBe(3);
    pending[2]?.resolve();
    await again;
  });

  it('fails the callers of a failed barrier, and serves the next ones', async () => {
    const { barrier, pending } = controlled();
    const first = barrier.wait();
    const second = barrier.wait();
    pending[0]?.reject(new Error('connection lost'));
    await expect(first).rejects.toThrow('connection lost');
    // The waiting one is sent regardless of the first's outcome.
    await new Promise((r) => setImmediate(r));
    expect(barrier.count).toBe(2);
    pending[1]?.resolve();
    await expect(second).resolves.toBeUndefined();
    const third = barrier.wait();
    pending[2]?.resolve();
    await expect(third).resolves.toBeUndefined();
  });
});

describe.runIf(onServer)('the commit barrier on the PostgreSQL server (decision 0032)', () => {
  const url = () => db?.databaseUrl as string;

  it('flushes the WAL past a commit made without the flush, every time', async () => {
    const pool = new SqlPool({ connectionString: url(), max: 3 }, 'server', { commitBarrier: true });
    try {
      expect(pool.durable).toBeDefined();
      await pool.execute('create table barrier_probe (id serial primary key, v text)');
      for (let i = 0; i < 20; i++) {
        // A write committed as app chat's end is: `synchronous_commit` off for its transaction.
        await pool.execute(
          "with a as (select set_config('synchronous_commit', 'off', true) as v) insert into barrier_probe (v) select v from a",
        );
        // The WAL's end now (global: at or past the commit record just written).
        const [at] = await pool.execute<{ lsn: string }[]>('select pg_current_wal_insert_lsn()::text as lsn');
        await pool.durable?.();
        const [flushed] = await pool.execute<{ behind: string }[]>(
          'select pg_wal_lsn_diff(?::pg_lsn, pg_current_wal_flush_lsn())::text as behind',
          [at?.lsn],
        );
        // Bytes of WAL up to that commit not on disk yet: none. (With `select txid_current()`
        // as the barrier, 40–144 bytes stayed behind: that transaction writes no WAL before its
        // commit record, so it commits asynchronously itself.)
        expect(Number(flushed?.behind)).toBeLessThanOrEqual(0);
      }
    } finally {
      await pool.close();
    }
  });

  it('the privilege check `openDatabase` makes answers false for a role once EXECUTE is revoked', async () => {
    const role = `aisuite_nobarrier_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
    const client = new pg.Client({ connectionString: url() });
    await client.connect();
    try {
      await client.query(`create role ${role}`);
      const allowed = async () => (await client.query(COMMIT_BARRIER_ALLOWED_SQL)).rows[0]?.allowed;
      await client.query(`set role ${role}`);
      expect(await allowed()).toBe(true); // granted to PUBLIC by default
      await client.query('reset role');
      await client.query(
        'revoke execute on function pg_logical_emit_message(boolean, text, text) from public',
      );
      await client.query(`set role ${role}`);
      expect(await allowed()).toBe(false);
      await client.query('reset role');
    } finally {
      await client.query('reset role').catch(() => undefined);
      await client.query(`drop role if exists ${role}`).catch(() => undefined);
      await client.end();
    }
  });
});
