import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from './config.js';
import { startTestServer } from './test/harness.js';

describe('DATABASE_POOL_MAX', () => {
  it('defaults to 10 connections per pool and takes a positive integer', () => {
    expect(loadConfig({}).databasePoolMax).toBe(10);
    expect(loadConfig({ DATABASE_POOL_MAX: ' ' }).databasePoolMax).toBe(10);
    expect(loadConfig({ DATABASE_POOL_MAX: '4' }).databasePoolMax).toBe(4);
  });

  it.each(['0', '-3', '2.5', '1001'])('refuses %s at start with the variable named', (v) => {
    expect(() => loadConfig({ DATABASE_POOL_MAX: v })).toThrow(ConfigError);
    expect(() => loadConfig({ DATABASE_POOL_MAX: v })).toThrow(
      'DATABASE_POOL_MAX: expected an integer from 1 to 1000',
    );
  });

  it('refuses a value that is not a number', () => {
    expect(() => loadConfig({ DATABASE_POOL_MAX: 'ten' })).toThrow(
      'DATABASE_POOL_MAX: expected a number, got "ten"',
    );
  });

  // PGlite serves every connection from one session, so only the server tells connections apart.
  it.skipIf(!process.env.DATABASE_URL)(
    'bounds both pools of a server to that many PostgreSQL connections under a burst',
    async () => {
      const ts = await startTestServer({ env: { DATABASE_POOL_MAX: '3' } });
      try {
        const burst = 12;
        const sleepy = 'select pg_backend_pid() as pid from pg_sleep(0.05)';
        const plain = await Promise.all(
          Array.from({ length: burst }, () => ts.server.deps.db.sql.execute<{ pid: number }[]>(sleepy)),
        );
        expect(new Set(plain.map((r) => r[0]?.pid)).size).toBe(3);
        const orm = await Promise.all(
          Array.from({ length: burst }, () => ts.server.deps.em().execute<{ pid: number }[]>(sleepy)),
        );
        expect(new Set(orm.map((r) => r[0]?.pid)).size).toBe(3);
      } finally {
        await ts.close();
      }
    },
  );
});
