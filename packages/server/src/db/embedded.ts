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
const LOCK_FILE = 'embedded-pg.lock.json';

interface LockInfo {
  pid: number;
  socketDir: string;
  port: number;
  startedAt: string;
}

const SOCKET_PATH_MAX = 100;

function pickSocketDir(dataDir: string | undefined): string {
  if (dataDir) {
    const candidate = path.join(dataDir, 'run');
    if (path.join(candidate, `.s.PGSQL.${EMBEDDED_PORT}`).length < SOCKET_PATH_MAX) {
      fs.mkdirSync(candidate, { recursive: true });
      return candidate;
    }
  }
  return fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-pg-'));
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

/** The running owner of `dataDir`, if any, that other processes can connect to. */
export async function findEmbeddedOwner(dataDir: string): Promise<LockInfo | undefined> {
  const lockPath = path.join(dataDir, LOCK_FILE);
  let info: LockInfo;
  try {
    info = JSON.parse(fs.readFileSync(lockPath, 'utf8')) as LockInfo;
  } catch {
    return undefined;
  }
  if (info.pid === process.pid) return undefined;
  if (!isAlive(info.pid)) return undefined;
  const ok = await canConnect(path.join(info.socketDir, `.s.PGSQL.${info.port}`));
  return ok ? info : undefined;
}

function acquireLock(dataDir: string, info: LockInfo): () => void {
  const lockPath = path.join(dataDir, LOCK_FILE);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = fs.openSync(lockPath, 'wx');
      fs.writeSync(fd, JSON.stringify(info));
      fs.closeSync(fd);
      return () => {
        try {
          const cur = JSON.parse(fs.readFileSync(lockPath, 'utf8')) as LockInfo;
          if (cur.pid === info.pid) fs.unlinkSync(lockPath);
        } catch {
          /* already gone */
        }
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let cur: LockInfo | undefined;
      try {
        cur = JSON.parse(fs.readFileSync(lockPath, 'utf8')) as LockInfo;
      } catch {
        cur = undefined;
      }
      if (cur && cur.pid !== info.pid && isAlive(cur.pid)) {
        throw new Error(
          `The embedded database in ${dataDir} is already open in process ${cur.pid}. ` +
            'Connect through it (the CLI does so by itself) or stop it first.',
        );
      }
      fs.rmSync(lockPath, { force: true }); // stale lock from a dead process
    }
  }
  throw new Error(`Could not lock the embedded database in ${dataDir}`);
}

export interface StartEmbeddedOptions {
  /** Directory of the data files; omit for an in-memory database (tests). */
  dataDir?: string;
  /** A data-dir tarball to start from (tests start from a migrated template). */
  loadDataDir?: Blob;
  maxConnections?: number;
}

export async function startEmbeddedPostgres(opts: StartEmbeddedOptions): Promise<EmbeddedPostgres> {
  let release = () => {};
  let pgDir: string | undefined;
  if (opts.dataDir) {
    fs.mkdirSync(opts.dataDir, { recursive: true });
    pgDir = path.join(opts.dataDir, 'pgdata');
  }
  const socketDir = pickSocketDir(opts.dataDir);
  if (opts.dataDir) {
    release = acquireLock(opts.dataDir, {
      pid: process.pid,
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
      release();
    },
  };
}
