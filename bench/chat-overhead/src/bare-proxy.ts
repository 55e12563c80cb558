/**
 * Child process: the reference point, a bare proxy on node:http that forwards the request to
 * the upstream and pipes the streamed bytes back (no auth, no database, no parsing). What a
 * gateway costs at the very least on this machine.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

const upstream = new URL(`${process.env.UPSTREAM_URL}/chat/completions`);
const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { messages: unknown };
    const up = http.request(
      upstream,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', authorization: 'Bearer bench' },
      },
      (ur) => {
        res.writeHead(ur.statusCode ?? 502, {
          'content-type': 'text/event-stream',
          'cache-control': 'no-cache',
        });
        ur.pipe(res);
      },
    );
    up.on('error', () => res.destroy());
    up.end(JSON.stringify({ model: 'fake-chat', messages: body.messages, stream: true }));
  });
});
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => {
  process.send?.({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
});
process.on('message', (msg: { type: string }) => {
  if (msg.type === 'stats') {
    const cpu = process.cpuUsage();
    process.send?.({
      type: 'stats',
      cpuMicros: cpu.user + cpu.system,
      maxRssKb: process.resourceUsage().maxRSS,
    });
  }
});
process.on('disconnect', () => process.exit(0));
