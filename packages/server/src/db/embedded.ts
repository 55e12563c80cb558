import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

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
      fs.mkdirSync(candidate, { recursive: true });
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
      const fd = fs.openSync(lockPath, 'wx');
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
}

export async function startEmbeddedPostgres(opts: StartEmbeddedOptions): Promise<EmbeddedPostgres> {
  let release = () => {};
  let pgDir: string | undefined;
  if (opts.dataDir) {
    fs.mkdirSync(opts.dataDir, { recursive: true });
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
    db = await PGlite.create({
      dataDir: pgDir,
      loadDataDir: opts.loadDataDir,
    });
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
      fs.rmSync(socketPath, { force: true });
      if (socketDirIsTemp) fs.rmSync(socketDir, { recursive: true, force: true });
      release();
    },
  };
}
