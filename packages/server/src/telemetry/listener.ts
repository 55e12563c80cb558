import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Metrics } from './metrics.js';

/**
 * The Prometheus endpoint on its own listener (`METRICS_PORT`, `METRICS_HOST`): `GET /metrics`
 * answers the registry in the text exposition format; anything else is 404. Never on the
 * public port.
 */
export async function listenMetrics(
  m: Metrics,
  port: number,
  host: string,
): Promise<{ url: string; close(): Promise<void> }> {
  const srv = http.createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.statusCode = 404;
      res.setHeader('content-type', 'application/json; charset=utf-8');
      res.end(JSON.stringify({ error: 'Not found', code: 'NOT_FOUND' }));
      return;
    }
    m.registry.metrics().then(
      (text) => {
        res.setHeader('content-type', m.registry.contentType);
        res.end(req.method === 'HEAD' ? undefined : text);
      },
      (err: Error) => {
        res.statusCode = 500;
        res.setHeader('content-type', 'text/plain; charset=utf-8');
        res.end(`# metrics collection failed: ${err.message}\n`);
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(port, host, () => resolve());
  });
  const addr = srv.address() as AddressInfo;
  const shown = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${shown}:${addr.port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        srv.close(() => resolve());
        srv.closeAllConnections();
      }),
  };
}
