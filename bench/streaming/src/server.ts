/**
 * Child process: the AI Suite server (production build, `packages/server/dist`, or the `dist`
 * in BENCH_SERVER_DIST) pointed at the fake upstream, on its own embedded database or
 * DATABASE_URL. Answers `stats` with its CPU time and RSS, and `db` with the database's
 * committed + rolled-back transaction count, the process ids of the backends serving it (for
 * their CPU time) and the rows written so far per table.
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as ServerModule from '@ai-suite/server';

const { createServer }: typeof ServerModule = await import(
  process.env.BENCH_FROM_SOURCE === '1'
    ? '@ai-suite/server'
    : process.env.BENCH_SERVER_DIST
      ? pathToFileURL(path.join(process.env.BENCH_SERVER_DIST, 'index.js')).href
      : '../../../packages/server/dist/index.js'
);

const server = await createServer({ env: process.env });
const { url } = await server.listen(0, '127.0.0.1');
process.send?.({ type: 'ready', url });
process.on('message', async (msg: { type: string }) => {
  if (msg.type === 'stats') {
    const cpu = process.cpuUsage();
    process.send?.({
      type: 'stats',
      cpuMicros: cpu.user + cpu.system,
      maxRssKb: process.resourceUsage().maxRSS,
      rssBytes: process.memoryUsage().rss,
    });
  } else if (msg.type === 'db') {
    const em = server.deps.em();
    const x = await em.execute<{ n: string }[]>(
      'select xact_commit + xact_rollback as n from pg_stat_database where datname = current_database()',
    );
    const pids = await em.execute<{ pid: number }[]>(
      'select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()',
    );
    // Rows written, per table (inserted + updated + deleted): on the PostgreSQL server only
    // (PGlite flushes these counters at its own pace; the bench does not read them there).
    const tables = process.env.DATABASE_URL
      ? await em.execute<{ relname: string; n: string }[]>(
          'select relname, n_tup_ins + n_tup_upd + n_tup_del as n from pg_stat_user_tables',
        )
      : [];
    process.send?.({
      type: 'db',
      xacts: Number(x[0]?.n ?? 0),
      pids: pids.map((p) => Number(p.pid)),
      rows: Object.fromEntries(tables.map((t) => [t.relname, Number(t.n)])),
    });
  }
});
process.on('disconnect', () => {
  void server.close().then(() => process.exit(0));
});
