import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Extensions } from '@electric-sql/pglite';
import { makeTreePrivate, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, prepareDataDir } from '../data-dir.js';
import { createFromImage, defaultImageDir, embeddedImageKey, embeddedImagePath } from './embedded-image.js';
import type { EmbeddedWorkerData, EmbeddedWorkerMessage, EmbeddedWorkerOp } from './embedded-worker.js';

/**
 * The embedded database. PGlite is Postgres compiled to WASM: one session, one process.
 * The process that opens the data directory owns it and serves it to everybody else
 * (its own connection pool, the operator CLI, a second tool) over the Postgres wire
 * protocol on a unix socket, through @electric-sql/pglite-socket. A lock file in the data
 * directory names the owner's pid and socket, so a second opener (another process, or this
 * one again) connects instead of opening the files twice (which would corrupt them).
 */
export interface EmbeddedPostgres {
  /** Directory holding the `.s.PGSQL.<port>` socket: pass it as `host` to `pg`. */
  socketDir: string;
  port: number;
  /** Where PGlite runs: the caller's thread (default) or a worker thread of its own. */
  thread: EmbeddedThread;
  /** SQL straight on the database's session, not through the socket (simple protocol). */
  exec(sql: string): Promise<void>;
  /** One statement with parameters straight on the database's session. */
  query<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<{ rows: R[] }>;
  /** A tarball of the data directory (`PGlite.dumpDataDir`). */
  dumpDataDir(compression?: 'none' | 'gzip' | 'auto'): Promise<Blob>;
  /** Bytes of the engine's WebAssembly memory (it grows and never shrinks), for reports. */
  wasmMemoryBytes(): Promise<number>;
  close(): Promise<void>;
}

/**
 * `main`: PGlite and its socket server run in the calling thread. `worker`: in a worker thread
 * of this process, so the database engine works on another core than the event loop that
 * serves HTTP (decision 0039: more throughput under load, ~15 MB more idle memory).
 */
export type EmbeddedThread = 'worker' | 'main';

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

/**
 * Lock files this process wrote and holds (its own open data directories). A lock naming this
 * process's pid is live only when listed here; otherwise it is stale (a restarted container
 * gets the same pid again).
 */
const heldHere = new Set<string>();

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

/** Whether the process named by a lock file still holds it (this process included). */
function isLiveHolder(info: LockInfo, lockPath: string): boolean {
  return info.pid === process.pid ? heldHere.has(path.resolve(lockPath)) : isAlive(info.pid);
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
  const lockPath = path.join(dataDir, LOCK_FILE);
  const info = readLock(lockPath);
  return info && isLiveHolder(info, lockPath) ? info : undefined;
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
    if (!info || !isLiveHolder(info, lockPath)) return undefined;
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
      heldHere.add(path.resolve(lockPath));
      return () => {
        heldHere.delete(path.resolve(lockPath));
        if (readLock(lockPath)?.pid === info.pid) fs.rmSync(lockPath, { force: true });
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const cur = readLock(lockPath);
      if (cur && isLiveHolder(cur, lockPath)) {
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
  /** Where PGlite runs (default `main`). */
  thread?: EmbeddedThread;
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
  const cleanup = () => {
    if (pgDir) makeTreePrivate(pgDir);
    fs.rmSync(socketPath, { force: true });
    if (socketDirIsTemp) fs.rmSync(socketDir, { recursive: true, force: true });
    release();
  };
  let engine: Engine;
  try {
    if (pgDir) await ensureDatabaseFiles(pgDir, opts.imageDir);
    const maxConnections = opts.maxConnections ?? 64;
    engine =
      opts.thread === 'worker'
        ? await startInWorker(opts, pgDir, socketPath, maxConnections)
        : await startInThisThread(opts, pgDir, socketPath, maxConnections);
    if (pgDir) makeTreePrivate(pgDir);
  } catch (err) {
    cleanup();
    throw err;
  }
  let closed = false;
  return {
    socketDir,
    port: EMBEDDED_PORT,
    thread: engine.thread,
    exec: (sql) => engine.exec(sql),
    query: (sql, params = []) => engine.query(sql, params),
    dumpDataDir: (compression = 'auto') => engine.dumpDataDir(compression),
    wasmMemoryBytes: () => engine.wasmMemoryBytes(),
    async close() {
      if (closed) return;
      closed = true;
      await engine.close();
      cleanup();
    },
  };
}

/** PGlite with its socket server, wherever it runs. */
type Engine = Pick<
  EmbeddedPostgres,
  'thread' | 'exec' | 'query' | 'dumpDataDir' | 'wasmMemoryBytes' | 'close'
>;

async function startInThisThread(
  opts: StartEmbeddedOptions,
  pgDir: string | undefined,
  socketPath: string,
  maxConnections: number,
): Promise<Engine> {
  // Loaded here, not at the top: with the engine in its worker this thread never loads PGlite.
  const { openEngine, wasmBytes } = await import('./embedded-engine.js');
  const { db, close } = await openEngine({
    pgDir,
    loadDataDir: opts.loadDataDir,
    extensions: opts.extensions,
    socketPath,
    maxConnections,
  });
  return {
    thread: 'main',
    exec: async (sql) => {
      await db.exec(sql);
    },
    query: async <R>(sql: string, params?: unknown[]) => ({ rows: (await db.query<R>(sql, params)).rows }),
    dumpDataDir: (compression) => db.dumpDataDir(compression),
    wasmMemoryBytes: async () => wasmBytes(db),
    close,
  };
}

/**
 * The worker's script: the build's `embedded-worker.js` beside this chunk; from the TypeScript
 * sources (tests, `pnpm dev`) a module that registers tsx (resolved from this package, as the
 * initdb child's is) and then imports the `.ts` file: a worker does not take `--import` hooks.
 */
function workerScript(): URL {
  if (!import.meta.url.endsWith('.ts')) return new URL('./embedded-worker.js', import.meta.url);
  const tsxDir = path.dirname(createRequire(import.meta.url).resolve('tsx/package.json'));
  const api = pathToFileURL(path.join(tsxDir, 'dist/esm/api/index.mjs')).href;
  const entry = new URL('./embedded-worker.ts', import.meta.url).href;
  const code = `import { register } from ${JSON.stringify(api)}; register(); await import(${JSON.stringify(entry)});`;
  return new URL(`data:text/javascript,${encodeURIComponent(code)}`);
}

async function startInWorker(
  opts: StartEmbeddedOptions,
  pgDir: string | undefined,
  socketPath: string,
  maxConnections: number,
): Promise<Engine> {
  const loadDataDir = opts.loadDataDir ? await opts.loadDataDir.arrayBuffer() : undefined;
  const data: EmbeddedWorkerData = {
    pgDir,
    loadDataDir,
    extensions: Object.keys(opts.extensions ?? {}),
    socketPath,
    maxConnections,
  };
  const worker = new Worker(workerScript(), {
    workerData: data,
    // The worker allocates little that lives (protocol buffers): a young generation of 4 MB
    // instead of V8's default growth to 16+ keeps ~16 MB of idle RSS off the process (decision 0039).
    resourceLimits: { maxYoungGenerationSizeMb: 4 },
    transferList: loadDataDir ? [loadDataDir] : [],
  });
  let closing = false;
  let exited = false;
  let nextId = 1;
  const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  await new Promise<void>((resolve, reject) => {
    const onMessage = (m: EmbeddedWorkerMessage) => {
      if (m.type === 'ready') done(resolve);
      else if (m.type === 'failed') done(() => reject(new Error(m.message)));
    };
    const onError = (err: Error) => done(() => reject(err));
    const onExit = (code: number) =>
      done(() =>
        reject(new Error(`The embedded database's worker exited with code ${code} before it was ready`)),
      );
    const done = (then: () => void) => {
      worker.off('message', onMessage).off('error', onError).off('exit', onExit);
      then();
    };
    worker.on('message', onMessage).on('error', onError).on('exit', onExit);
  });
  worker.on('message', (m: EmbeddedWorkerMessage) => {
    if (m.type !== 'reply') return;
    const w = waiting.get(m.id);
    waiting.delete(m.id);
    if (!w) return;
    if (m.ok) w.resolve(m.value);
    else w.reject(Object.assign(new Error(m.message), m.code ? { code: m.code } : {}));
  });
  // The database is gone with its thread: fail what waits on it, and, unless it was being
  // closed, let the process fail as it would if PGlite had failed in its own thread.
  worker.on('exit', (code) => {
    exited = true;
    for (const w of waiting.values()) w.reject(new Error(`The embedded database's worker exited (${code})`));
    waiting.clear();
  });
  worker.on('error', (err) => {
    if (!closing) throw err;
  });
  const ask = <T>(req: EmbeddedWorkerOp): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      if (exited) return reject(new Error('The embedded database is closed'));
      const id = nextId++;
      waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      worker.postMessage({ ...req, id });
    });
  return {
    thread: 'worker',
    exec: (sql) => ask<void>({ op: 'exec', sql }),
    query: (sql, params = []) => ask({ op: 'query', sql, params }),
    dumpDataDir: async (compression = 'auto') =>
      new Blob([await ask<ArrayBuffer>({ op: 'dump', compression })]),
    wasmMemoryBytes: () => ask<number>({ op: 'memory' }),
    async close() {
      closing = true;
      await ask<void>({ op: 'close' }).catch(() => {});
      await worker.terminate();
      exited = true;
    },
  };
}
