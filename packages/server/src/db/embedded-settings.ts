/**
 * PostgreSQL settings of the embedded database, for initdb and every start. PGlite's
 * defaults are PostgreSQL's: `shared_buffers` 128 MB, which PostgreSQL zeroes at start, so
 * each process that opened the database held ~150 MB of WebAssembly memory before its first
 * query. 16 MB holds the hot pages of a single-node deployment; the rest is cached by the
 * operating system, which PGlite reads through (docs/decisions/0019-lean-embedded-database.md).
 */
export const EMBEDDED_SETTINGS = ['-c', 'shared_buffers=16MB'];
