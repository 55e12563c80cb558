/**
 * Child process of `startEmbeddedPostgres`: creates a fresh embedded data directory, initdb and
 * every migration applied. initdb grows PGlite's WebAssembly memory to several hundred
 * megabytes, which a WebAssembly memory never gives back; in a process of its own, that memory
 * goes back to the system when the process exits (docs/decisions/0019-lean-embedded-database.md).
 * With an image path, the result is also cached there (`embedded-image.ts`), so the next fresh
 * data directory is extracted from it instead of running this again.
 *
 * Usage: node embedded-initdb.js <pgdata directory> [<image file>]
 *        node embedded-initdb.js --image   (`pnpm build`: makes the default image ahead of the
 *                                          first start, unless it exists)
 */
import fs from 'node:fs';
import { Readable } from 'node:stream';
import { startEmbeddedPostgres } from './embedded.js';
import {
  defaultImageDir,
  embeddedImageKey,
  embeddedImagePath,
  extractDataDirTar,
  writeImage,
} from './embedded-image.js';
import { EMBEDDED_EXTENSIONS } from './extensions.js';
import { openDatabase } from './orm.js';

const imageOnly = process.argv[2] === '--image';
const target = imageOnly ? undefined : process.argv[2];
const image = imageOnly ? embeddedImagePath(defaultImageDir(), await embeddedImageKey()) : process.argv[3];
if (!imageOnly && !target) {
  process.stderr.write('usage: embedded-initdb <pgdata directory> [<image file>] | --image\n');
  process.exit(2);
}
if (imageOnly && image && fs.existsSync(image)) process.exit(0);

// initdb and the migrations in memory, then the files written straight to disk: PGlite's own
// path writes them one by one through its emulated file system, slower, and world-writable.
const embedded = await startEmbeddedPostgres({ extensions: EMBEDDED_EXTENSIONS });
let dump: Blob;
try {
  const db = await openDatabase({ embedded, migrate: true, poolMax: 1 });
  await db.close();
  // The dump is a copy of the files as they are: without a checkpoint, every start from it
  // would first replay the WAL of initdb and the migrations (crash recovery).
  await embedded.exec('checkpoint');
  dump = await embedded.dumpDataDir('none');
} finally {
  await embedded.close();
}
const bytes = new Uint8Array(await dump.arrayBuffer());
if (image) writeImage(image, bytes);
if (target) await extractDataDirTar(Readable.from([bytes]), target);
