/**
 * A worker process for the multi-process tests (runs.workers.test.ts): a full server
 * (run engine workers included) started from the environment, without an HTTP listener.
 * Run with `node --import tsx`; reports `{ready, workerId}` over IPC.
 */
import { createServer } from '../../server.js';

const server = await createServer({ env: process.env });
process.send?.({ ready: true, workerId: server.deps.runs.workerId });
process.on('SIGTERM', () => {
  void server.close().finally(() => process.exit(0));
});
setInterval(() => {}, 1 << 30);
