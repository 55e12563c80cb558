/**
 * A server process for the multi-process schedule tests (schedules.processes.test.ts): a full
 * server (run engine and schedule ticker) started from the environment, without an HTTP
 * listener. Run with `node --import tsx`; reports `{ready}` over IPC. With
 * `HANG_AFTER_CLAIM=1` the first tick it claims is reported (`{claimed, scheduleId, tickAt}`)
 * and then never finished, as a process that dies between claiming a tick and writing its run.
 */
import { createServer } from '../../server.js';
import { tickHooks } from './fire.js';

if (process.env.HANG_AFTER_CLAIM === '1') {
  tickHooks.afterClaim = async (scheduleId, tickAt) => {
    process.send?.({ claimed: true, scheduleId, tickAt: tickAt.toISOString() });
    await new Promise(() => {});
  };
}
const server = await createServer({ env: process.env });
process.send?.({ ready: true });
process.on('SIGTERM', () => {
  void server.close().finally(() => process.exit(0));
});
setInterval(() => {}, 1 << 30);
