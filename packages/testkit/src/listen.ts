import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ListeningServer {
  /** Base URL, e.g. `http://127.0.0.1:41234`. */
  url: string;
  server: http.Server;
  close(): Promise<void>;
}

/** Serves `handler` on 127.0.0.1 (a free port unless `port` is given): the base of every fake upstream. */
export function listen(handler: http.RequestListener, port = 0): Promise<ListeningServer> {
  return new Promise((resolve, reject) => {
    const server = http.createServer(handler);
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const { port: bound } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${bound}`,
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
