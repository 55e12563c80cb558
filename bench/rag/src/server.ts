/**
 * Child process of the ingest section: the AI Suite server (production build,
 * `packages/server/dist`; `BENCH_FROM_SOURCE=1` for the TypeScript sources) configured by its
 * environment like `pnpm start`, on its own embedded database (in DATA_DIR, in this process) or
 * DATABASE_URL. The bench samples this process's RSS from /proc; over IPC it answers `mem` with
 * `process.memoryUsage()` plus the size of PGlite's WASM memory when the embedded database runs
 * here, and `gc` by collecting garbage (when started with `--expose-gc`) first.
 */
import type * as ServerModule from '@ai-suite/server';

const { createServer }: typeof ServerModule = await import(
  process.env.BENCH_FROM_SOURCE === '1' ? '@ai-suite/server' : '../../../packages/server/dist/index.js'
);

const server = await createServer({ env: process.env });
const { url } = await server.listen(0, '127.0.0.1');

/** Bytes of PGlite's WASM linear memory (it grows and never shrinks), 0 on the PostgreSQL server. */
const wasmBytes = async () => (await server.deps.db.embedded?.wasmMemoryBytes()) ?? 0;

async function mem() {
  const m = process.memoryUsage();
  return {
    rss: m.rss,
    heapTotal: m.heapTotal,
    heapUsed: m.heapUsed,
    external: m.external,
    arrayBuffers: m.arrayBuffers,
    wasm: await wasmBytes(),
  };
}

/** To the bench, unless it is gone (then `disconnect` below closes the server). */
const reply = (msg: object) => {
  if (process.connected) process.send?.(msg, undefined, undefined, () => {});
};
reply({ type: 'ready', url, pid: process.pid });
process.on('message', async (msg: { type: string }) => {
  if (msg.type === 'mem') reply({ type: 'mem', ...(await mem()) });
  else if (msg.type === 'gc') {
    const gc = (globalThis as { gc?: () => void }).gc;
    gc?.();
    gc?.();
    reply({ type: 'gc', collected: Boolean(gc), ...(await mem()) });
  }
});
process.on('disconnect', () => {
  void server.close().then(() => process.exit(0));
});
