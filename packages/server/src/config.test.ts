import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from './config.js';
import { startTestServer } from './test/harness.js';

describe('DATABASE_POOL_MAX and DATABASE_HOT_POOL_MAX', () => {
  it('default to 10 connections for the ORM and 5 for the hot paths, and take a positive integer', () => {
    expect(loadConfig({})).toMatchObject({ databasePoolMax: 10, databaseHotPoolMax: 5 });
    expect(loadConfig({ DATABASE_POOL_MAX: ' ', DATABASE_HOT_POOL_MAX: '' })).toMatchObject({
      databasePoolMax: 10,
      databaseHotPoolMax: 5,
    });
    expect(loadConfig({ DATABASE_POOL_MAX: '4', DATABASE_HOT_POOL_MAX: '12' })).toMatchObject({
      databasePoolMax: 4,
      databaseHotPoolMax: 12,
    });
  });

  it.each(['DATABASE_POOL_MAX', 'DATABASE_HOT_POOL_MAX'])('refuses a bad %s at start, naming it', (name) => {
    for (const v of ['0', '-3', '2.5', '1001']) {
      expect(() => loadConfig({ [name]: v })).toThrow(ConfigError);
      expect(() => loadConfig({ [name]: v })).toThrow(`${name}: expected an integer from 1 to 1000`);
    }
    expect(() => loadConfig({ [name]: 'ten' })).toThrow(`${name}: expected a number, got "ten"`);
  });

  it('pipeline the hot paths by default, and take on or off (decision 0030)', () => {
    expect(loadConfig({})).toMatchObject({ databaseHotPoolPipeline: true });
    expect(loadConfig({ DATABASE_HOT_POOL_PIPELINE: ' ' })).toMatchObject({ databaseHotPoolPipeline: true });
    expect(loadConfig({ DATABASE_HOT_POOL_PIPELINE: 'on' })).toMatchObject({ databaseHotPoolPipeline: true });
    expect(loadConfig({ DATABASE_HOT_POOL_PIPELINE: 'off' })).toMatchObject({
      databaseHotPoolPipeline: false,
    });
    expect(() => loadConfig({ DATABASE_HOT_POOL_PIPELINE: 'yes' })).toThrow(
      'DATABASE_HOT_POOL_PIPELINE: expected "on" or "off", got "yes"',
    );
  });

  // PGlite serves every connection from one session, so only the server tells connections apart.
  it.skipIf(!process.env.DATABASE_URL)(
    'bounds each pool of a server to its number of PostgreSQL connections under a burst',
    async () => {
      for (const pipeline of ['on', 'off']) {
        const ts = await startTestServer({
          env: { DATABASE_POOL_MAX: '3', DATABASE_HOT_POOL_MAX: '2', DATABASE_HOT_POOL_PIPELINE: pipeline },
        });
        try {
          const burst = 12;
          const sleepy = 'select pg_backend_pid() as pid from pg_sleep(0.05)';
          const plain = await Promise.all(
            Array.from({ length: burst }, () => ts.server.deps.db.sql.execute<{ pid: number }[]>(sleepy)),
          );
          expect(new Set(plain.map((r) => r[0]?.pid)).size).toBe(2);
          const orm = await Promise.all(
            Array.from({ length: burst }, () => ts.server.deps.em().execute<{ pid: number }[]>(sleepy)),
          );
          expect(new Set(orm.map((r) => r[0]?.pid)).size).toBe(3);
        } finally {
          await ts.close();
        }
      }
    },
  );
});

describe('EMBEDDED_DATABASE_THREAD (decision 0039)', () => {
  it('runs the embedded engine in a worker thread by default, and takes main or worker', () => {
    expect(loadConfig({})).toMatchObject({ embeddedDatabaseThread: 'worker' });
    expect(loadConfig({ EMBEDDED_DATABASE_THREAD: '' })).toMatchObject({ embeddedDatabaseThread: 'worker' });
    expect(loadConfig({ EMBEDDED_DATABASE_THREAD: 'worker' })).toMatchObject({
      embeddedDatabaseThread: 'worker',
    });
    expect(loadConfig({ EMBEDDED_DATABASE_THREAD: 'main' })).toMatchObject({
      embeddedDatabaseThread: 'main',
    });
    expect(() => loadConfig({ EMBEDDED_DATABASE_THREAD: 'thread' })).toThrow(
      'EMBEDDED_DATABASE_THREAD: expected "worker" or "main", got "thread"',
    );
  });
});
