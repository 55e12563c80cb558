/**
 * PGlite and its socket server, opened the same way in whichever thread runs the engine: the
 * server's own (`embedded.ts` imports this module only then) or the worker's
 * (`embedded-worker.ts`, decision 0039).
 */
import { type Extensions, PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import { EMBEDDED_SETTINGS } from './embedded-settings.js';

export interface EngineOptions {
  pgDir: string | undefined;
  loadDataDir: Blob | undefined;
  extensions: Extensions | undefined;
  socketPath: string;
  maxConnections: number;
}

export interface OpenEngine {
  db: PGlite;
  /** Stops the socket server, then closes the database (flushing it to disk). */
  close(): Promise<void>;
}

export async function openEngine(opts: EngineOptions): Promise<OpenEngine> {
  const db = await PGlite.create({
    dataDir: opts.pgDir,
    loadDataDir: opts.loadDataDir,
    // PGlite's defaults (they belong to its version, which the image key names), then ours.
    startParams: [...PGlite.defaultStartParams, ...EMBEDDED_SETTINGS],
    extensions: opts.extensions,
  });
  const server = new PGLiteSocketServer({ db, path: opts.socketPath, maxConnections: opts.maxConnections });
  try {
    await server.start();
  } catch (err) {
    await db.close().catch(() => {});
    throw err;
  }
  return {
    db,
    async close() {
      await server.stop();
      await db.close();
    },
  };
}

/** PGlite's WebAssembly memory in bytes: its Emscripten module is not a public API, read only to report. */
export const wasmBytes = (db: PGlite) =>
  (db as unknown as { mod?: { HEAPU8?: Uint8Array } }).mod?.HEAPU8?.byteLength ?? 0;
