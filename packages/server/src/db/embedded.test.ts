import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { createServer } from '../server.js';
import {
  type EmbeddedPostgres,
  type EmbeddedThread,
  findEmbeddedOwner,
  LOCK_FILE,
  lockHolder,
  startEmbeddedPostgres,
} from './embedded.js';
import { EMBEDDED_EXTENSIONS } from './extensions.js';

// The engine's thread is the embedded database's own concern; the PostgreSQL server runs none.
const embedded = !process.env.DATABASE_URL;

const dirs: string[] = [];
const opened: EmbeddedPostgres[] = [];
afterEach(async () => {
  for (const e of opened.splice(0)) await e.close();
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

const dataDir = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-embedded-test-'));
  dirs.push(d);
  return d;
};

/** The suite's migrated template (global setup): a start from it skips initdb. */
const template = () => {
  const file = inject('pgTemplate');
  return file ? new Blob([fs.readFileSync(file)]) : undefined;
};

async function start(opts: Parameters<typeof startEmbeddedPostgres>[0]) {
  const e = await startEmbeddedPostgres(
    opts.dataDir || opts.loadDataDir ? opts : { loadDataDir: template(), ...opts },
  );
  opened.push(e);
  return e;
}

/** A client of the socket, as the server's pools are. */
async function client(e: EmbeddedPostgres) {
  const c = new pg.Client({ host: e.socketDir, port: e.port, user: 'postgres', database: 'postgres' });
  await c.connect();
  return c;
}

/** The longest this thread's event loop went without running a 10 ms timer while `work` ran. */
async function longestStall(work: () => Promise<unknown>): Promise<number> {
  let last = performance.now();
  let longest = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 10);
  try {
    await work();
  } finally {
    clearInterval(timer);
  }
  return Math.max(longest, performance.now() - last);
}

describe.runIf(embedded)('the embedded database in a worker thread (decision 0039)', () => {
  it('runs PGlite in a worker when asked: a long statement does not stop this thread', async () => {
    const stalls: Record<EmbeddedThread, number> = { worker: 0, main: 0 };
    for (const thread of ['worker', 'main'] as const) {
      // The caller's thread is the default.
      const e = await start(thread === 'main' ? {} : { thread });
      expect(e.thread).toBe(thread);
      // Its WebAssembly memory (from the worker, by message) holds at least the 16 MB of shared buffers.
      expect(await e.wasmMemoryBytes()).toBeGreaterThan(16 * 1024 * 1024);
      const c = await client(e);
      try {
        stalls[thread] = await longestStall(() => c.query('select pg_sleep(1)'));
      } finally {
        await c.end();
      }
    }
    // In the caller's thread the statement holds the event loop for its whole length; in the
    // worker the loop goes on serving (the server's HTTP work, in production).
    expect(stalls.main).toBeGreaterThanOrEqual(900);
    expect(stalls.worker).toBeLessThan(700);
  });

  it('answers exec, query and a dump from the worker, and a dump starts a new database with the data', async () => {
    const e = await start({ extensions: EMBEDDED_EXTENSIONS, thread: 'worker' });
    await e.exec(
      `create extension if not exists vector; create table notes (id int, body text, v vector(2));`,
    );
    await e.query('insert into notes values ($1, $2, $3)', [1, "it's here", '[1,2]']);
    expect((await e.query<{ body: string; v: string }>('select body, v::text from notes')).rows).toEqual([
      { body: "it's here", v: '[1,2]' },
    ]);
    await expect(e.query('select * from no_such_table')).rejects.toMatchObject({ code: '42P01' });
    const dump = await e.dumpDataDir('gzip');
    expect(dump.size).toBeGreaterThan(0);
    const copy = await start({ loadDataDir: dump, extensions: EMBEDDED_EXTENSIONS, thread: 'worker' });
    const c = await client(copy);
    try {
      expect((await c.query('select id, body from notes')).rows).toEqual([{ id: 1, body: "it's here" }]);
    } finally {
      await c.end();
    }
  });

  it('fails a start it cannot complete, then keeps a data directory across starts and frees it on close', async () => {
    const dir = dataDir();
    const lock = path.join(dir, LOCK_FILE);
    // A start the worker cannot complete: the reason, and no lock left behind.
    await expect(
      startEmbeddedPostgres({
        dataDir: dir,
        extensions: { nope: EMBEDDED_EXTENSIONS.vector },
        thread: 'worker',
      }),
    ).rejects.toThrow(`The embedded database's worker cannot load the extension "nope"`);
    expect(fs.existsSync(lock)).toBe(false);
    // The directory opens right after.
    const first = await start({ dataDir: dir, thread: 'worker' });
    await first.exec('create table kept (n int); insert into kept values (7);');
    const socket = path.join(first.socketDir, `.s.PGSQL.${first.port}`);
    expect(fs.existsSync(lock)).toBe(true);
    await first.close();
    await first.close(); // twice is harmless
    expect(fs.existsSync(lock)).toBe(false);
    expect(fs.existsSync(socket)).toBe(false);
    // Asking a closed worker is refused at once.
    await expect(first.query('select 1')).rejects.toThrow('The embedded database is closed');
    const again = await start({ dataDir: dir, thread: 'worker' });
    expect((await again.query('select n from kept')).rows).toEqual([{ n: 7 }]);
  });

  it('takes over a lock naming this process that it does not hold; attaches to one it holds', async () => {
    const dir = dataDir();
    const lock = path.join(dir, LOCK_FILE);
    // Left by an earlier process with the same pid (a restarted container): stale.
    fs.writeFileSync(lock, JSON.stringify({ pid: process.pid, socketDir: dir, port: 5432, startedAt: '' }));
    expect(lockHolder(dir)).toBeUndefined();
    expect(await findEmbeddedOwner(dir, { waitMs: 0 })).toBeUndefined();
    const owner = await start({ dataDir: dir, thread: 'main' });
    // Held by this process: a second opener here connects through the socket, never opens the files.
    expect(lockHolder(dir)).toMatchObject({ pid: process.pid, socketDir: owner.socketDir });
    expect(await findEmbeddedOwner(dir, { waitMs: 0 })).toMatchObject({ pid: process.pid, port: owner.port });
    await expect(startEmbeddedPostgres({ dataDir: dir, thread: 'main' })).rejects.toThrow(
      `is already open in process ${process.pid}`,
    );
    expect(lockHolder(dir)).toMatchObject({ socketDir: owner.socketDir }); // the refused start left the lock
    await owner.close();
    expect(lockHolder(dir)).toBeUndefined();
  });

  it('is where a server on a data directory runs its engine: a worker by default, EMBEDDED_DATABASE_THREAD=main its own thread', async () => {
    for (const [setting, thread] of [
      [undefined, 'worker'],
      ['main', 'main'],
    ] as const) {
      const server = await createServer({
        env: { DATA_DIR: dataDir(), LOG_LEVEL: 'silent', EMBEDDED_DATABASE_THREAD: setting },
      });
      try {
        expect(server.deps.db.embedded?.thread).toBe(thread);
      } finally {
        await server.close();
      }
    }
  });
});
