/**
 * Worker thread of `startEmbeddedPostgres` (`thread: 'worker'`, `EMBEDDED_DATABASE_THREAD`): PGlite and its
 * socket server, so the database engine runs on a core of its own instead of the server's event
 * loop (decision 0039). The process's pools reach it over the unix socket exactly as they
 * would in the main thread; the parent asks for the few things that are not SQL over a pool
 * (`exec`, `query`, a dump of the data directory, `close`) by message.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { Extensions } from '@electric-sql/pglite';
import { type OpenEngine, openEngine, wasmBytes } from './embedded-engine.js';
import { EMBEDDED_EXTENSIONS } from './extensions.js';

/** What the parent passes in `workerData`. */
export interface EmbeddedWorkerData {
  pgDir: string | undefined;
  /** The bytes of a data-dir tarball to start from (tests), transferred. */
  loadDataDir: ArrayBuffer | undefined;
  /** Names of `EMBEDDED_EXTENSIONS` to load. */
  extensions: string[];
  socketPath: string;
  maxConnections: number;
}

/** What the parent asks of the worker. */
export type EmbeddedWorkerOp =
  | { op: 'exec'; sql: string }
  | { op: 'query'; sql: string; params: unknown[] }
  | { op: 'dump'; compression: 'none' | 'gzip' | 'auto' }
  | { op: 'memory' }
  | { op: 'close' };

/** A request of the parent, answered by a `reply` with the same `id`. */
export type EmbeddedWorkerRequest = EmbeddedWorkerOp & { id: number };

export type EmbeddedWorkerMessage =
  | { type: 'ready' }
  | { type: 'failed'; message: string }
  | { type: 'reply'; id: number; ok: true; value?: unknown }
  | { type: 'reply'; id: number; ok: false; message: string; code?: string };

const port = parentPort;
if (!port) throw new Error('embedded-worker runs as a worker thread of startEmbeddedPostgres');
const data = workerData as EmbeddedWorkerData;
const post = (m: EmbeddedWorkerMessage, transfer: ArrayBuffer[] = []) => port.postMessage(m, transfer);

let engine: OpenEngine;
try {
  const extensions: Extensions = {};
  const known = EMBEDDED_EXTENSIONS as Extensions;
  for (const name of data.extensions) {
    const ext = known[name];
    if (!ext) throw new Error(`The embedded database's worker cannot load the extension "${name}"`);
    extensions[name] = ext;
  }
  engine = await openEngine({
    pgDir: data.pgDir,
    loadDataDir: data.loadDataDir ? new Blob([data.loadDataDir]) : undefined,
    extensions,
    socketPath: data.socketPath,
    maxConnections: data.maxConnections,
  });
} catch (err) {
  post({ type: 'failed', message: err instanceof Error ? err.message : String(err) });
  process.exit(1);
}

const pg = engine.db;
post({ type: 'ready' });

port.on('message', async (req: EmbeddedWorkerRequest) => {
  try {
    switch (req.op) {
      case 'exec':
        await pg.exec(req.sql);
        post({ type: 'reply', id: req.id, ok: true });
        break;
      case 'query': {
        const res = await pg.query(req.sql, req.params);
        post({ type: 'reply', id: req.id, ok: true, value: { rows: res.rows } });
        break;
      }
      case 'dump': {
        const bytes = await (await pg.dumpDataDir(req.compression)).arrayBuffer();
        post({ type: 'reply', id: req.id, ok: true, value: bytes }, [bytes]);
        break;
      }
      case 'memory':
        post({ type: 'reply', id: req.id, ok: true, value: wasmBytes(pg) });
        break;
      case 'close':
        await engine.close();
        post({ type: 'reply', id: req.id, ok: true });
        port.close();
        break;
    }
  } catch (err) {
    const e = err as { message?: string; code?: string };
    post({ type: 'reply', id: req.id, ok: false, message: e.message ?? String(err), code: e.code });
  }
});
