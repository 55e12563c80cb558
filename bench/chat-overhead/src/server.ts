/**
 * Child process: the AI Suite server pointed at the fake upstream, on its own embedded
 * database (or DATABASE_URL). Answers `stats` with its CPU time and peak RSS. Runs the
 * production build (`packages/server/dist`, what `pnpm start` runs; the bench script builds it
 * first), or the TypeScript sources with BENCH_FROM_SOURCE=1.
 */
import type * as ServerModule from '@ai-suite/server';

// BENCH_SERVER_DIST: another build's dist directory, to compare two versions in one sitting.
const { createServer }: typeof ServerModule = await import(
  process.env.BENCH_FROM_SOURCE === '1'
    ? '@ai-suite/server'
    : process.env.BENCH_SERVER_DIST
      ? `${process.env.BENCH_SERVER_DIST}/index.js`
      : '../../../packages/server/dist/index.js'
);

const server = await createServer({ env: process.env });
const { url } = await server.listen(0, '127.0.0.1');
process.send?.({ type: 'ready', url });
process.on('message', (msg: { type: string }) => {
  if (msg.type === 'stats') {
    const cpu = process.cpuUsage();
    process.send?.({
      type: 'stats',
      cpuMicros: cpu.user + cpu.system,
      maxRssKb: process.resourceUsage().maxRSS,
      rssBytes: process.memoryUsage().rss,
    });
  }
});
process.on('disconnect', () => {
  void server.close().then(() => process.exit(0));
});
