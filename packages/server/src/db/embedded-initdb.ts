/**
 * Child process of `startEmbeddedPostgres`: creates a fresh embedded data directory. initdb
 * grows PGlite's WebAssembly memory to several hundred megabytes, which a WebAssembly memory
 * never gives back; in a process of its own, that memory goes back to the system when the
 * process exits (docs/decisions/0019-lean-embedded-database.md).
 *
 * Usage: node embedded-initdb.js <pgdata directory>
 */
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { PGlite } from '@electric-sql/pglite';
import tar from 'tar-stream';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../data-dir.js';
import { EMBEDDED_START_PARAMS } from './embedded-settings.js';

const target = process.argv[2];
if (!target) {
  process.stderr.write('usage: embedded-initdb <pgdata directory>\n');
  process.exit(2);
}

// initdb in memory, then the files written straight to disk: PGlite's own path writes them
// one by one through its emulated file system, slower, and world-writable (0666).
const db = await PGlite.create({ startParams: EMBEDDED_START_PARAMS });
const dump = await db.dumpDataDir('none');
await db.close();

const partial = `${target}.init-${process.pid}`;
fs.rmSync(partial, { recursive: true, force: true });
fs.mkdirSync(partial, { recursive: true, mode: PRIVATE_DIR_MODE });
const extract = tar.extract();
extract.on('entry', (header, body, next) => {
  // Entries are `<top>/<path>`: the top folder is the data directory itself.
  const rel = header.name.split('/').slice(1).join('/');
  const dest = path.join(partial, rel);
  if (rel === '' || !dest.startsWith(`${partial}${path.sep}`)) {
    body.resume();
    body.on('end', next);
    return;
  }
  if (header.type === 'directory') {
    fs.mkdirSync(dest, { recursive: true, mode: PRIVATE_DIR_MODE });
    body.resume();
    body.on('end', next);
    return;
  }
  fs.mkdirSync(path.dirname(dest), { recursive: true, mode: PRIVATE_DIR_MODE });
  pipeline(body, fs.createWriteStream(dest, { mode: PRIVATE_FILE_MODE })).then(() => next(), next);
});
await pipeline(Readable.fromWeb(dump.stream() as Parameters<typeof Readable.fromWeb>[0]), extract);
// Only a complete directory takes the final name: an interrupted initdb leaves no half database.
fs.renameSync(partial, target);
