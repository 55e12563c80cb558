import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';
import type { MigrationObject } from '@mikro-orm/core';
import tar from 'tar-stream';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../data-dir.js';
import { EMBEDDED_SETTINGS } from './embedded-settings.js';
import { EMBEDDED_EXTENSIONS } from './extensions.js';
import { migrationsList } from './migrations/index.js';

/**
 * The image of a fresh embedded database: initdb and every migration already applied, as the
 * gzipped tar PGlite dumps (`dumpDataDir`). A fresh `DATA_DIR/pgdata` is extracted from it in a
 * fraction of what initdb and the migrations cost; the image itself is made once, by the
 * `embedded-initdb` child of the first fresh start or by `pnpm build`
 * (docs/decisions/0019-lean-embedded-database.md, item 8).
 *
 * It is cached under the server package's `node_modules/.cache`, named by a key that covers
 * everything that decides its contents: PGlite's version, the start parameters, the loaded
 * extensions, and the name and source of every migration. A stale image (another key) is never
 * used; a corrupt one fails gzip's CRC or the tar format, is deleted, and the start falls back
 * to initdb. Writing it is best effort (a read-only `node_modules` only loses the speed-up).
 */

const IMAGE_FORMAT = 1;

/** Where images are cached by default: `<server package>/node_modules/.cache/ai-suite-embedded`. */
export function defaultImageDir(): string {
  // From the sources this file is src/db/…; in the production build, a chunk in dist/.
  const root = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? '../..' : '..', import.meta.url));
  return path.join(root, 'node_modules', '.cache', 'ai-suite-embedded');
}

function pgliteVersion(): string {
  const require = createRequire(import.meta.url);
  let dir = path.dirname(require.resolve('@electric-sql/pglite'));
  for (;;) {
    const file = path.join(dir, 'package.json');
    if (fs.existsSync(file)) {
      const pkg = JSON.parse(fs.readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === '@electric-sql/pglite') return pkg.version ?? 'unknown';
    }
    const up = path.dirname(dir);
    if (up === dir) return 'unknown';
    dir = up;
  }
}

/**
 * What a migration does, for the key: the SQL its `up()` adds (run without a database: the
 * migrations here only call `addSql`), else its source text.
 */
async function migrationFingerprint(m: MigrationObject): Promise<unknown> {
  try {
    const Cls = m.class as unknown as new (
      driver: unknown,
      config: unknown,
    ) => {
      up(): Promise<void> | void;
      getQueries(): unknown[];
    };
    const migration = new Cls(undefined, undefined);
    await migration.up();
    return migration.getQueries().map((q) => (typeof q === 'string' ? q : String(q)));
  } catch {
    return String(m.class);
  }
}

/** The key of the image the current code would make (a hex sha256). */
export async function embeddedImageKey(migrations: MigrationObject[] = migrationsList): Promise<string> {
  const hash = createHash('sha256');
  hash.update(
    JSON.stringify({
      format: IMAGE_FORMAT,
      pglite: pgliteVersion(),
      // PGlite's own defaults come with its version, above.
      startParams: EMBEDDED_SETTINGS,
      extensions: Object.keys(EMBEDDED_EXTENSIONS),
      migrations: await Promise.all(migrations.map(async (m) => [m.name, await migrationFingerprint(m)])),
    }),
  );
  return hash.digest('hex');
}

export function embeddedImagePath(dir: string, key: string): string {
  return path.join(dir, `pgdata-${key.slice(0, 24)}.tar.gz`);
}

/**
 * Extracts a PGlite data-dir tar into `target` (which must not exist): owner-only modes, under a temporary name renamed into place, so an interrupted extraction
 * leaves no half database under `target`.
 */
export async function extractDataDirTar(source: Readable, target: string, gzipped = false): Promise<void> {
  const partial = `${target}.init-${process.pid}`;
  fs.rmSync(partial, { recursive: true, force: true });
  fs.mkdirSync(partial, { recursive: true, mode: PRIVATE_DIR_MODE });
  try {
    const extract = tar.extract();
    const made = new Set<string>([partial]);
    const mkdir = (dir: string) => {
      if (made.has(dir)) return;
      fs.mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
      made.add(dir);
    };
    extract.on('entry', (header, body, next) => {
      // Entries are `<top>/<path>`: the top folder is the data directory itself.
      const rel = header.name.split('/').slice(1).join('/');
      const dest = path.join(partial, rel);
      const skip = rel === '' || !dest.startsWith(`${partial}${path.sep}`);
      let fd: number | undefined;
      body.on('data', (chunk: Buffer) => {
        if (skip || header.type === 'directory') return;
        try {
          if (fd === undefined) {
            mkdir(path.dirname(dest));
            fd = fs.openSync(dest, 'w', PRIVATE_FILE_MODE);
          }
          // Written as it arrives, synchronously (most files are one chunk): no copy is held.
          fs.writeSync(fd, chunk);
        } catch (err) {
          if (fd !== undefined) fs.closeSync(fd);
          fd = undefined;
          extract.destroy(err as Error);
        }
      });
      body.on('error', next);
      body.on('end', () => {
        try {
          if (fd !== undefined) fs.closeSync(fd);
          else if (skip) {
            // the top folder itself, or a path outside it: nothing to write
          } else if (header.type === 'directory') mkdir(dest);
          else {
            mkdir(path.dirname(dest));
            fs.closeSync(fs.openSync(dest, 'w', PRIVATE_FILE_MODE)); // an empty file
          }
          next();
        } catch (err) {
          next(err as Error);
        }
      });
    });
    if (gzipped) await pipeline(source, zlib.createGunzip({ chunkSize: 64 * 1024 }), extract);
    else await pipeline(source, extract);
    if (!fs.existsSync(path.join(partial, 'PG_VERSION'))) throw new Error('no PG_VERSION in the image');
    fs.renameSync(partial, target);
  } catch (err) {
    fs.rmSync(partial, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Creates `pgDir` from the cached image at `file`. False when there is none; a corrupt or
 * unreadable one (bad gzip CRC or length, a broken tar, no database in it) is deleted and false
 * returned, so the caller falls back to initdb.
 */
export async function createFromImage(file: string, pgDir: string): Promise<boolean> {
  if (!fs.existsSync(file)) return false;
  try {
    await extractDataDirTar(fs.createReadStream(file), pgDir, true);
    return true;
  } catch (err) {
    // Writing the database failed (no space, permissions): initdb would fail the same way.
    const failed = (err as NodeJS.ErrnoException).path;
    if (failed?.startsWith(pgDir)) {
      throw new Error(`Could not create the embedded database in ${pgDir}: ${(err as Error).message}`);
    }
    fs.rmSync(file, { force: true });
    return false;
  }
}

/**
 * Writes the image (a data-dir tar) to `file` atomically and deletes the images of other keys
 * beside it. Best effort: any error is swallowed.
 */
export function writeImage(file: string, dataDirTar: Uint8Array): void {
  const dir = path.dirname(file);
  const tmp = `${file}.tmp-${process.pid}`;
  try {
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(tmp, zlib.gzipSync(dataDirTar, { level: 1 }), { mode: PRIVATE_FILE_MODE });
    fs.renameSync(tmp, file);
    for (const name of fs.readdirSync(dir)) {
      const other = path.join(dir, name);
      // Images of other keys, and what a writer killed midway left (older than ten minutes).
      const stale =
        (/^pgdata-[0-9a-f]+\.tar\.gz$/.test(name) && name !== path.basename(file)) ||
        (/^pgdata-[0-9a-f]+\.tar\.gz\.tmp-\d+$/.test(name) &&
          Date.now() - fs.statSync(other).mtimeMs > 10 * 60_000);
      if (stale) fs.rmSync(other, { force: true });
    }
  } catch {
    fs.rmSync(tmp, { force: true });
  }
}
