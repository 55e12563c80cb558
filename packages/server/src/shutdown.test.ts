import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LOCK_FILE } from './db/embedded.js';
import { spawnServerProcess } from './test/spawn.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

describe('the server process', () => {
  // The engine in the server's thread (the default) or in a worker thread (decision 0039).
  it.each(['main', 'worker'])(
    'starts on the embedded database (engine thread: %s), serves, and exits 0 on SIGTERM releasing the data directory',
    async (thread) => {
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-shutdown-'));
      dirs.push(dataDir);
      const child = spawnServerProcess({
        DATA_DIR: dataDir,
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'info',
        LISTEN_BACKLOG: '123',
        EMBEDDED_DATABASE_THREAD: thread,
      });
      try {
        let out = '';
        child.stdout?.on('data', (d) => {
          out += d.toString();
        });
        let err = '';
        child.stderr?.on('data', (d) => {
          err += d.toString();
        });
        await expect
          .poll(
            () => /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1] ?? (child.exitCode !== null ? err : undefined),
            {
              timeout: 240_000, // a fresh data directory runs initdb and every migration
              interval: 200,
            },
          )
          .toMatch(/^http:\/\//);
        const url = /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1];

        const health = await fetch(`${url}/healthz`);
        expect(health.status).toBe(200);
        const ready = await fetch(`${url}/readyz`);
        expect(await ready.json()).toEqual({ status: 'ready', database: 'embedded', objectStore: 'local' });
        const lock = JSON.parse(fs.readFileSync(path.join(dataDir, LOCK_FILE), 'utf8')) as { pid: number };
        expect(lock.pid).toBe(child.pid);
        expect(notPrivate(dataDir)).toEqual([]);
        // LISTEN_BACKLOG reaches listen(2): the kernel reports a listening socket's backlog as
        // its Send-Q (below net.core.somaxconn, which caps it).
        expect(listenBacklog(Number(new URL(url as string).port))).toBe(123);

        const exited = once(child, 'exit');
        child.kill('SIGTERM');
        const [code, signal] = await exited;
        expect({ code, signal }).toEqual({ code: 0, signal: null });
        expect(out).toContain('"msg":"shutting down"');
        expect(fs.existsSync(path.join(dataDir, LOCK_FILE))).toBe(false);
        expect(fs.readdirSync(path.join(dataDir, 'run'))).toEqual([]); // socket removed
        await expect(fetch(`${url}/healthz`)).rejects.toThrow();
        expect(notPrivate(dataDir)).toEqual([]);
        expect(fs.existsSync(path.join(dataDir, 'pgdata', 'PG_VERSION'))).toBe(true);
      } finally {
        if (child.exitCode === null) child.kill('SIGKILL');
      }
    },
    300_000,
  );

  it('refuses to start on a data directory other users can write, saying how to fix it', async () => {
    const open = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-open-'));
    try {
      fs.chmodSync(open, 0o777);
      const child = spawnServerProcess({ DATA_DIR: open, PORT: '0', HOST: '127.0.0.1' });
      let err = '';
      child.stderr?.on('data', (d) => {
        err += d.toString();
      });
      const [code] = await once(child, 'exit');
      expect(code).toBe(1);
      expect(err).toContain(
        `Failed to start: DATA_DIR ${open} can be written by other users (mode 0777); make it private to the user running the service (chmod 700 ${open}) and start again`,
      );
      expect(fs.readdirSync(open)).toEqual([]); // nothing was created in it
    } finally {
      fs.rmSync(open, { recursive: true, force: true });
    }
  }, 120_000);
});

/** Entries under `dir` that other users could read or write (sockets aside: a directory guards them). */
function notPrivate(dir: string): string[] {
  const out: string[] = [];
  const stack = [dir];
  for (let d = stack.pop(); d !== undefined; d = stack.pop()) {
    if ((fs.statSync(d).mode & 0o777) !== 0o700)
      out.push(`${d} ${(fs.statSync(d).mode & 0o777).toString(8)}`);
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const full = path.join(d, e.name);
      if (e.isDirectory()) stack.push(full);
      else if (e.isFile() && (fs.statSync(full).mode & 0o077) !== 0) {
        out.push(`${full} ${(fs.statSync(full).mode & 0o777).toString(8)}`);
      }
    }
  }
  return out;
}

/** The backlog of the socket listening on `port`, as `ss` reads it from the kernel. */
function listenBacklog(port: number): number {
  const line = execFileSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' }).trim();
  return Number(line.split(/\s+/)[2]);
}
