/**
 * Child process: the AI Suite server pointed at the fake upstream, on its own embedded
 * database (or DATABASE_URL). Answers `stats` with its CPU time and peak RSS. Runs the
 * production build (`packages/server/dist`, what `pnpm start` runs; the bench script builds it
 * first), or the TypeScript sources with BENCH_FROM_SOURCE=1.
 */
import fs from 'node:fs';
import { Session } from 'node:inspector/promises';
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
// BENCH_PROF (main.ts): a V8 CPU profile of this process between prof-start and prof-stop.
let profiler: Session | undefined;
process.on('message', async (msg: { type: string; file?: string }) => {
  if (msg.type === 'prof-start') {
    profiler = new Session();
    profiler.connect();
    await profiler.post('Profiler.enable');
    await profiler.post('Profiler.start');
    process.send?.({ type: 'prof-started' });
  } else if (msg.type === 'prof-stop' && profiler && msg.file) {
    const { profile } = await profiler.post('Profiler.stop');
    fs.writeFileSync(msg.file, JSON.stringify(profile));
    profiler.disconnect();
    profiler = undefined;
    process.send?.({ type: 'prof-stopped' });
  } else if (msg.type === 'stats') {
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
