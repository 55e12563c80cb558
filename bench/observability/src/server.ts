/**
 * Child process: the AI Suite server (the production build, `packages/server/dist`; another
 * build's dist directory with BENCH_SERVER_DIST; the sources with BENCH_FROM_SOURCE=1) with the
 * telemetry its environment asks for. Answers `stats` with its CPU time (all threads).
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as ServerModule from '@ai-suite/server';

const { createServer }: typeof ServerModule = await import(
  process.env.BENCH_FROM_SOURCE === '1'
    ? '@ai-suite/server'
    : process.env.BENCH_SERVER_DIST
      ? pathToFileURL(path.join(path.resolve(process.env.BENCH_SERVER_DIST), 'index.js')).href
      : '../../../packages/server/dist/index.js'
);

const server = await createServer({ env: process.env });
const { url } = await server.listen(0, '127.0.0.1');
process.send?.({ type: 'ready', url });
process.on('message', (msg: { type: string }) => {
  if (msg.type !== 'stats') return;
  const cpu = process.cpuUsage();
  process.send?.({ type: 'stats', cpuMicros: cpu.user + cpu.system, rssBytes: process.memoryUsage().rss });
});
process.on('disconnect', () => {
  void server.close().then(() => process.exit(0));
});
