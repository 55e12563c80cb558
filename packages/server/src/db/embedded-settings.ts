/**
 * PostgreSQL settings of the embedded database, for initdb and every start. PGlite's
 * defaults are PostgreSQL's: `shared_buffers` 128 MB, which PostgreSQL zeroes at start, so
 * each process that opened the database held ~150 MB of WebAssembly memory before its first
 * query. 16 MB holds the hot pages of a single-node deployment; the rest is cached by the
 * operating system, which PGlite reads through (docs/decisions/0019-lean-embedded-database.md).
 */
export const EMBEDDED_SETTINGS = ['-c', 'shared_buffers=16MB'];

/**
 * Every start parameter: PGlite's defaults, then ours. Given PGlite (loaded by the thread that
 * runs the engine only; the defaults belong to its version, which the image key names).
 */
export const embeddedStartParams = (pglite: { defaultStartParams: string[] }) => [
  ...pglite.defaultStartParams,
  ...EMBEDDED_SETTINGS,
];

/** PGlite's WebAssembly memory in bytes: its Emscripten module is not a public API, read only to report. */
export const pgliteWasmBytes = (db: unknown) =>
  (db as { mod?: { HEAPU8?: Uint8Array } }).mod?.HEAPU8?.byteLength ?? 0;
