import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LOCK_FILE } from './db/embedded.js';
import { startCommand } from './start-command.js';
import { cleanEnv, SERVER_DIR } from './test/spawn.js';

const ROOT = path.resolve(SERVER_DIR, '../..');
const GRACE_MS = 3000;
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-start-'));
afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }));

/** Bytes the server has not read yet on its side of the connection from `clientPort`. */
function serverRecvQ(port: number, clientPort: number): number | undefined {
  const line = execFileSync(
    'ss',
    ['-tnH', 'state', 'established', `( sport = :${port} and dport = :${clientPort} )`],
    {
      encoding: 'utf8',
    },
  ).trim();
  return line ? Number(line.split(/\s+/)[0]) : undefined;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * `pnpm start` as an operator (or a container's PID 1) runs it: the signal goes to the pnpm
 * process only, never to the process group. The chain pnpm → sh → node must hand it on (the
 * root script evaluates the server's start script, which ends in `exec node`), or node is
 * orphaned and keeps serving.
 */
describe('pnpm start', () => {
  it('stops the server gracefully within SHUTDOWN_GRACE_MS when only the pnpm process gets SIGTERM', async () => {
    const child = spawn('pnpm', ['start'], {
      cwd: ROOT,
      env: cleanEnv({
        DATA_DIR: dataDir,
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'info',
        SHUTDOWN_GRACE_MS: String(GRACE_MS),
      }),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // its own process group: nothing but the explicit kill reaches it
    });
    let out = '';
    child.stdout?.on('data', (d) => {
      out += d.toString();
    });
    child.stderr?.on('data', (d) => {
      out += d.toString();
    });
    let serverPid: number | undefined;
    try {
      await expect
        .poll(
          () => /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1] ?? (child.exitCode !== null ? out : undefined),
          {
            timeout: 240_000, // tsup build, then initdb and every migration
            interval: 200,
          },
        )
        .toMatch(/^http:\/\//);
      const url = /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1] as string;
      expect((await fetch(`${url}/readyz`)).status).toBe(200);
      serverPid = (JSON.parse(fs.readFileSync(path.join(dataDir, LOCK_FILE), 'utf8')) as { pid: number }).pid;
      expect(serverPid).not.toBe(child.pid);
      // One wrapper at most: the server is the pnpm process's own child (no second pnpm between).
      const ppid = (pid: number) => {
        const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
        return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      };
      expect(ppid(serverPid)).toBe(child.pid);
      // The memory settings of decision 0019 reach the server process.
      const argv = fs.readFileSync(`/proc/${serverPid}/cmdline`, 'utf8').split('\0');
      expect(argv).toContain('--liftoff-only');
      expect(argv).toContain('--max-semi-space-size=4');
      const environ = fs.readFileSync(`/proc/${serverPid}/environ`, 'utf8').split('\0');
      expect(environ).toContain('MALLOC_ARENA_MAX=2');

      // Two requests still in flight (headers not complete) when the signal comes. The server
      // answers the one that completes during the grace period, and closes the other when the
      // grace period ends. Shown by what happens, not by elapsed time.
      const { port } = new URL(url);
      const open = async () => {
        const socket = net.connect(Number(port), '127.0.0.1');
        await once(socket, 'connect');
        socket.on('error', () => undefined);
        socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n');
        let received = '';
        socket.on('data', (d) => {
          received += d.toString();
        });
        const closed = once(socket, 'close').then(() => true);
        return { socket, closed, received: () => received };
      };
      const finishing = await open();
      const stalled = await open();
      // The server has read both partial requests (its sockets' receive queues are empty), so
      // they are requests in flight when the signal comes, not unread bytes on idle connections.
      for (const s of [finishing, stalled]) {
        await expect
          .poll(() => serverRecvQ(Number(port), s.socket.localPort as number), { timeout: 30_000 })
          .toBe(0);
      }

      const exited = once(child, 'exit');
      child.kill('SIGTERM'); // the pnpm process only
      await expect.poll(() => out, { timeout: 30_000 }).toContain('"msg":"shutting down"');
      // Shutting down, yet still serving the request in flight.
      expect(alive(serverPid)).toBe(true);
      finishing.socket.write('\r\n');
      await expect.poll(finishing.received, { timeout: 30_000 }).toMatch(/^HTTP\/1\.1 200 /);
      // The stalled one holds the server until the grace period ends, then it is closed.
      await stalled.closed;
      const [code] = await exited;
      expect(code).toBe(0);
      expect(alive(serverPid)).toBe(false);
      expect(out).toContain('shutdown grace period elapsed: closing the connections still open');
      expect(stalled.received()).toBe('');
      expect(fs.existsSync(path.join(dataDir, LOCK_FILE))).toBe(false);
      await expect(fetch(`${url}/healthz`)).rejects.toThrow();
    } finally {
      if (child.exitCode === null && child.pid) process.kill(-child.pid, 'SIGKILL');
      if (serverPid && alive(serverPid)) process.kill(serverPid, 'SIGKILL');
    }
  }, 300_000);
});

describe('pnpm start: node flags (decision 0039)', () => {
  it("caps the main thread's young generation on the embedded database only", () => {
    expect(startCommand({})).toEqual({
      nodeArgs: ['--liftoff-only', '--max-semi-space-size=4'],
      env: { MALLOC_ARENA_MAX: '2' },
    });
    expect(startCommand({ DATABASE_URL: 'postgres://db.example/app', MALLOC_ARENA_MAX: '1' })).toEqual({
      nodeArgs: ['--liftoff-only'],
      env: { MALLOC_ARENA_MAX: '1' },
    });
    expect(startCommand({ DATABASE_URL: '' }).nodeArgs).toEqual([
      '--liftoff-only',
      '--max-semi-space-size=4',
    ]);
  });
});
