import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Extensions, PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import { makeTreePrivate, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, prepareDataDir } from '../data-dir.js';
import { createFromImage, defaultImageDir, embeddedImageKey, embeddedImagePath } from './embedded-image.js';
import { EMBEDDED_START_PARAMS } from './embedded-settings.js';

/**
 * The embedded database. PGlite is Postgres compiled to WASM: one session, one process.
 * The process that opens the data directory owns it and serves it to everybody else
 * (its own connection pool, the operator CLI, a second tool) over the Postgres wire
 * protocol on a unix socket, through @electric-sql/pglite-socket. A lock file in the data
 * directory names the owner's pid and socket, so a second process connects instead of
 * opening the files twice (which would corrupt them).
 */
export interface EmbeddedPostgres {
  /** Directory holding the `.s.PGSQL.<port>` socket: pass it as `host` to `pg`. */
  socketDir: string;
  port: number;
  db: PGlite;
  close(): Promise<void>;
}

export const EMBEDDED_PORT = 5432;
export const LOCK_FILE = 'embedded-pg.lock.json';

export interface LockInfo {
  pid: number;
  /** `cli` for a short-lived operator command, which a starting server waits out. */
  kind?: 'server' | 'cli';
  socketDir: string;
  port: number;
  startedAt: string;
}

const SOCKET_PATH_MAX = 100;

/** Unix socket paths are limited to ~104 bytes: deep data directories use a temp directory. */
function pickSocketDir(dataDir: string | undefined): { dir: string; temporary: boolean } {
  if (dataDir) {
    const candidate = path.join(dataDir, 'run');
    if (path.join(candidate, `.s.PGSQL.${EMBEDDED_PORT}`).length < SOCKET_PATH_MAX) {
      fs.mkdirSync(candidate, { recursive: true, mode: PRIVATE_DIR_MODE });
      return { dir: candidate, temporary: false };
    }
  }
  return { dir: fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-pg-')), temporary: true };
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function canConnect(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(socketPath);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

function readLock(lockPath: string): LockInfo | undefined {
  try {
    return JSON.parse(fs.readFileSync(lockPath, 'utf8')) as LockInfo;
  } catch {
    return undefined;
  }
}

/** The live holder of `dataDir`'s lock, listening or not (undefined when free or stale). */
export function lockHolder(dataDir: string): LockInfo | undefined {
  const info = readLock(path.join(dataDir, LOCK_FILE));
  return info && info.pid !== process.pid && isAlive(info.pid) ? info : undefined;
}

export interface FindOwnerOptions {
  /**
   * How long to wait for an owner that holds the lock but does not accept connections yet
   * (it is still starting PGlite). Default 15 s.
   */
  waitMs?: number;
}

/**
 * The running owner of `dataDir`, if any, that other processes can connect to. An owner that
 * is alive but not listening yet is waited for; a lock left by a dead process is ignored.
 */
export async function findEmbeddedOwner(
  dataDir: string,
  opts: FindOwnerOptions = {},
): Promise<LockInfo | undefined> {
  const lockPath = path.join(dataDir, LOCK_FILE);
  const deadline = Date.now() + (opts.waitMs ?? 15_000);
  for (;;) {
    const info = readLock(lockPath);
    if (!info || info.pid === process.pid || !isAlive(info.pid)) return undefined;
    if (await canConnect(path.join(info.socketDir, `.s.PGSQL.${info.port}`))) return info;
    if (Date.now() >= deadline) return undefined;
    await new Promise((r) => setTimeout(r, 100));
  }
}

function acquireLock(dataDir: string, info: LockInfo): () => void {
  const lockPath = path.join(dataDir, LOCK_FILE);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = fs.openSync(lockPath, 'wx', PRIVATE_FILE_MODE);
      fs.writeSync(fd, JSON.stringify(info));
      fs.closeSync(fd);
      return () => {
        if (readLock(lockPath)?.pid === info.pid) fs.rmSync(lockPath, { force: true });
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const cur = readLock(lockPath);
      if (cur && cur.pid !== info.pid && isAlive(cur.pid)) {
        throw new Error(
          `The embedded database in ${dataDir} is already open in process ${cur.pid}, which does ` +
            'not accept connections. Stop that process, or, if it is not an AI Suite process, ' +
            `delete ${lockPath}.`,
        );
      }
      fs.rmSync(lockPath, { force: true }); // stale lock from a dead process
    }
  }
  throw new Error(`Could not lock the embedded database in ${dataDir}`);
}

/** The Postgres files of an embedded database under `dataDir` (absent until its first start). */
export const embeddedPgDir = (dataDir: string) => path.join(dataDir, 'pgdata');

export interface StartEmbeddedOptions {
  /** Directory of the data files; omit for an in-memory database (tests). */
  dataDir?: string;
  /** A data-dir tarball to start from (tests start from a migrated template). */
  loadDataDir?: Blob;
  maxConnections?: number;
  /** Recorded in the lock file (default `server`). */
  ownerKind?: 'server' | 'cli';
  /** PGlite extensions to load (e.g. `vector`); `CREATE EXTENSION` in a migration enables them. */
  extensions?: Extensions;
  /**
   * Where the image of a fresh, migrated database is cached (`embedded-image.ts`; default under
   * the server package's `node_modules/.cache`), `false` to always run initdb.
   */
  imageDir?: string | false;
}

/**
 * initdb and the migrations of a fresh `pgdata` in a child process (`embedded-initdb.ts`): the
 * memory initdb grows goes back to the system when the child exits, instead of staying in this
 * process's WebAssembly memory for good. With `image`, the child also caches the result there.
 */
async function initdbInChildProcess(pgDir: string, image?: string): Promise<void> {
  const fromSource = import.meta.url.endsWith('.ts');
  const entry = fileURLToPath(
    new URL(fromSource ? './embedded-initdb.ts' : './embedded-initdb.js', import.meta.url),
  );
  // From the TypeScript sources (tests, `pnpm dev`, the CLI) the child needs tsx, resolved
  // from this package; the production build runs plain JavaScript.
  // --liftoff-only: a process this short never profits from V8's optimising compiler for
  // WebAssembly; tiering initdb's hot functions up cost it ~1.4 of its ~4 CPU seconds.
  const args = [
    '--liftoff-only',
    ...(fromSource ? ['--import', 'tsx'] : []),
    entry,
    pgDir,
    ...(image ? [image] : []),
  ];
  const cwd = fromSource ? fileURLToPath(new URL('../..', import.meta.url)) : undefined;
  await new Promise<void>((resolve, reject) => {
    execFile(process.execPath, args, { cwd, maxBuffer: 4 * 1024 * 1024 }, (err, _stdout, stderr) => {
      if (err)
        reject(
          new Error(`Could not create the embedded database in ${pgDir}: ${stderr.trim() || err.message}`),
        );
      else resolve();
    });
  });
}

/**
 * Makes sure `pgDir` holds a database: a missing or empty directory gets one, extracted from
 * the cached image of a fresh migrated database when there is a valid one, else made by initdb
 * and the migrations in a child process (which caches the image for the next time).
 */
async function ensureDatabaseFiles(pgDir: string, imageDir: string | false | undefined): Promise<void> {
  if (fs.existsSync(path.join(pgDir, 'PG_VERSION'))) return;
  if (fs.existsSync(pgDir)) {
    if (fs.readdirSync(pgDir).length > 0) {
      throw new Error(
        `${pgDir} is not empty but holds no database (no PG_VERSION): move it away and start again`,
      );
    }
    fs.rmdirSync(pgDir);
  }
  const image =
    imageDir === false
      ? undefined
      : embeddedImagePath(imageDir ?? defaultImageDir(), await embeddedImageKey());
  if (image && (await createFromImage(image, pgDir))) return;
  await initdbInChildProcess(pgDir, image);
}

export async function startEmbeddedPostgres(opts: StartEmbeddedOptions): Promise<EmbeddedPostgres> {
  let release = () => {};
  let pgDir: string | undefined;
  if (opts.dataDir) {
    prepareDataDir(opts.dataDir, ['pgdata']);
    pgDir = embeddedPgDir(opts.dataDir);
  }
  const { dir: socketDir, temporary: socketDirIsTemp } = pickSocketDir(opts.dataDir);
  if (opts.dataDir) {
    release = acquireLock(opts.dataDir, {
      pid: process.pid,
      kind: opts.ownerKind ?? 'server',
      socketDir,
      port: EMBEDDED_PORT,
      startedAt: new Date().toISOString(),
    });
  }
  const socketPath = path.join(socketDir, `.s.PGSQL.${EMBEDDED_PORT}`);
  fs.rmSync(socketPath, { force: true });
  let db: PGlite | undefined;
  let server: PGLiteSocketServer | undefined;
  try {
    if (pgDir) await ensureDatabaseFiles(pgDir, opts.imageDir);
    db = await PGlite.create({
      dataDir: pgDir,
      loadDataDir: opts.loadDataDir,
      startParams: EMBEDDED_START_PARAMS,
      extensions: opts.extensions,
    });
    if (pgDir) makeTreePrivate(pgDir);
    server = new PGLiteSocketServer({
      db,
      path: socketPath,
      maxConnections: opts.maxConnections ?? 64,
    });
    await server.start();
  } catch (err) {
    await db?.close().catch(() => {});
    release();
    throw err;
  }
  const pg = db;
  const srv = server;
  let closed = false;
  return {
    socketDir,
    port: EMBEDDED_PORT,
    db: pg,
    async close() {
      if (closed) return;
      closed = true;
      await srv.stop();
      await pg.close();
      if (pgDir) makeTreePrivate(pgDir);
      fs.rmSync(socketPath, { force: true });
      if (socketDirIsTemp) fs.rmSync(socketDir, { recursive: true, force: true });
      release();
    },
  };
}
