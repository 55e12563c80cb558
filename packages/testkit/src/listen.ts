import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ListeningServer {
  /** Base URL, e.g. `http://127.0.0.1:41234`. */
  url: string;
  server: http.Server;
  close(): Promise<void>;
}

/** Serves `handler` on a free port of 127.0.0.1: the base of every fake upstream. */
export function listen(handler: http.RequestListener): Promise<ListeningServer> {
  return new Promise((resolve, reject) => {
    const server = http.createServer(handler);
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}`,
        server,
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done());
            server.closeAllConnections();
          }),
      });
    });
  });
}
