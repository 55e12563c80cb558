/**
 * Child process: the AI Suite server pointed at the fake upstream, on its own embedded
 * database (or DATABASE_URL). Answers `stats` with its CPU time and peak RSS.
 */
import { createServer } from '@ai-suite/server';

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
