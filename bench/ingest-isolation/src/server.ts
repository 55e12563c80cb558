/**
 * Child process of the bench: the AI Suite server (production build, `packages/server/dist`)
 * configured by its environment like `pnpm start`, with `perf_hooks.monitorEventLoopDelay`
 * watching its event loop. Over IPC: `reset` starts a new measurement, `eld` answers the
 * delay's percentiles since then (ms).
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type * as ServerModule from '@ai-suite/server';

/** The build (`pnpm --filter @ai-suite/server build`), as `pnpm start` runs it. */
const BUILD = '../../../packages/server/dist/index.js';
const { createServer }: typeof ServerModule = await import(BUILD);

const server = await createServer({ env: process.env });
const { url } = await server.listen(0, '127.0.0.1');
/** The histogram's values include its sampling interval: it is taken off. */
const RESOLUTION_MS = 5;
const h = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
h.enable();

const reply = (msg: object) => {
  if (process.connected) process.send?.(msg, undefined, undefined, () => {});
};
reply({ type: 'ready', url, pid: process.pid });
process.on('message', (msg: { type: string }) => {
  if (msg.type === 'reset') {
    h.reset();
    reply({ type: 'reset' });
  } else if (msg.type === 'eld') {
    reply({
      type: 'eld',
      p50: h.percentile(50) / 1e6 - RESOLUTION_MS,
      p99: h.percentile(99) / 1e6 - RESOLUTION_MS,
      max: h.max / 1e6 - RESOLUTION_MS,
      mean: h.mean / 1e6 - RESOLUTION_MS,
      count: h.count,
    });
  }
});
process.on('disconnect', () => {
  void server.close().then(() => process.exit(0));
});
