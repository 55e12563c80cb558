/**
 * Starts the production build the way `pnpm start` does (the last command of the server's
 * `start` script: its environment settings and node flags, `exec node … dist/main.js`) on a
 * fresh embedded data directory, waits for `/readyz`, waits `BENCH_IDLE_MS` (10 s), reads the
 * server's RSS; stops it and does the same again on the data it left (a restart). Repeats
 * `BENCH_RUNS` times and prints every run and the medians.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../../', import.meta.url));
// BENCH_SERVER_ENTRY: another build's dist/main.js, to compare two versions in one sitting.
const entry = process.env.BENCH_SERVER_ENTRY ?? path.join(root, 'packages/server/dist/main.js');
const runs = Number(process.env.BENCH_RUNS ?? 3);
const idleMs = Number(process.env.BENCH_IDLE_MS ?? 10_000);
const nodeArgs = process.env.BENCH_SERVER_NODE_ARGS ?? '';
const viaPnpm = process.env.BENCH_VIA === 'pnpm';
const serverDir = path.join(root, 'packages/server');
// What `pnpm start` runs once the build is done: the last command of the start script, e.g.
// `MALLOC_MMAP_THRESHOLD_=… exec node --max-semi-space-size=1 dist/main.js`. BENCH_START_COMMAND
// replaces it (an older version's command, to compare two builds as each would start).
const startScript = (
  JSON.parse(fs.readFileSync(path.join(serverDir, 'package.json'), 'utf8')) as { scripts: { start: string } }
).scripts.start;
const startCommand = process.env.BENCH_START_COMMAND ?? (startScript.split('&&').pop() ?? '').trim();
if (!/\bexec node\b.*\bdist\/main\.js$/.test(startCommand)) {
  throw new Error(`unexpected start command (want "… exec node … dist/main.js"): ${startCommand}`);
}
const command = startCommand
  .replace(/\bexec node\b/, `exec ${JSON.stringify(process.execPath)}${nodeArgs ? ` ${nodeArgs}` : ''}`)
  .replace(/dist\/main\.js$/, JSON.stringify(entry));

interface Sample {
  readyMs: number;
  /** CPU seconds (user + system) the server and its finished children used until ready. */
  cpuS: number;
  rssMb: number;
  anonMb: number;
  peakMb: number;
  childrenMb: number;
  /** The whole process tree that was started: with BENCH_VIA=pnpm, pnpm's wrappers included. */
  treeMb: number;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** kB fields of /proc/<pid>/status (VmRSS, RssAnon, VmHWM…). */
function procStatus(pid: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
    const m = /^(\w+):\s+(\d+) kB/.exec(line);
    if (m) out[m[1] as string] = Number(m[2]);
  }
  return out;
}

/** utime + stime + cutime + cstime of `pid`, in seconds (clock ticks of 10 ms). */
function cpuSeconds(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return [11, 12, 13, 14].reduce((sum, i) => sum + Number(f[i]), 0) / 100;
}

/** The live descendants of `pid`. */
function descendants(pid: number): number[] {
  const out: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(d), ...descendants(Number(d)));
    } catch {
      // the process ended while we looked
    }
  }
  return out;
}

/** RSS of the live descendants of `pid` (a helper process the server keeps, if any). */
function descendantsRssKb(pid: number): number {
  let total = 0;
  for (const d of descendants(pid)) {
    try {
      total += procStatus(d).VmRSS ?? 0;
    } catch {
      // the process ended while we looked
    }
  }
  return total;
}

/** With BENCH_VIA=pnpm: the server process under `pnpm start` (the one running dist/main.js). */
function serverUnder(pid: number): number {
  for (const d of descendants(pid)) {
    try {
      if (fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('dist/main.js')) return d;
    } catch {
      // the process ended while we looked
    }
  }
  throw new Error(`no dist/main.js process under ${pid}`);
}

async function waitReady(url: string, child: ReturnType<typeof spawn>, t0: number): Promise<number> {
  for (;;) {
    if (child.exitCode !== null) throw new Error(`server exited with ${child.exitCode} before /readyz`);
    try {
      const res = await fetch(`${url}/readyz`);
      if (res.status === 200) return performance.now() - t0;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function startOnce(dataDir: string, log: fs.WriteStream): Promise<Sample> {
  const port = await freePort();
  const t0 = performance.now();
  const env = { ...process.env, DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', DATABASE_URL: '' };
  // `exec`: the shell becomes the server, so `child.pid` is the server's pid. With
  // BENCH_VIA=pnpm, `child.pid` is the pnpm process of the root's `pnpm start` (its build step
  // included in the ready time) and the server is found under it.
  const child = viaPnpm
    ? spawn('pnpm', ['start'], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn('sh', ['-c', command], { cwd: serverDir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.pipe(log, { end: false });
  child.stderr?.pipe(log, { end: false });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  let sample: Sample;
  try {
    const readyMs = await waitReady(`http://127.0.0.1:${port}`, child, t0);
    const top = child.pid as number;
    const pid = viaPnpm ? serverUnder(top) : top;
    const cpuS = cpuSeconds(pid);
    await new Promise((r) => setTimeout(r, idleMs));
    const s = procStatus(pid);
    sample = {
      readyMs,
      cpuS,
      rssMb: (s.VmRSS ?? 0) / 1024,
      anonMb: (s.RssAnon ?? 0) / 1024,
      peakMb: (s.VmHWM ?? 0) / 1024,
      childrenMb: descendantsRssKb(pid) / 1024,
      treeMb: ((procStatus(top).VmRSS ?? 0) + descendantsRssKb(top)) / 1024,
    };
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  child.kill('SIGTERM');
  const code = await exited;
  if (code !== 0) throw new Error(`server exited with ${code} on SIGTERM`);
  return sample;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
};

// The image of a fresh migrated database the build caches (decision 0019, item 8): removed
// before a first start, which measures a start with no image (initdb and the migrations in the
// child, which caches the image again); the fresh starts after it extract their data from it.
const imageDir = path.join(path.dirname(entry), '..', 'node_modules', '.cache', 'ai-suite-embedded');

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-bench-startup-'));
const log = fs.createWriteStream(path.join(tmp, 'server.log'));
const fresh: Sample[] = [];
const restart: Sample[] = [];
let noImage: Sample | undefined;
try {
  console.log(
    `node ${process.version}, ${os.cpus().length} CPUs, load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log(
    `${entry}: ${runs} run(s), idle ${idleMs} ms before reading RSS; server log ${path.join(tmp, 'server.log')}`,
  );
  console.log(viaPnpm ? 'command: pnpm start (the root script, build step included)' : `command: ${command}`);
  fs.rmSync(imageDir, { recursive: true, force: true });
  noImage = await startOnce(path.join(tmp, 'data-no-image'), log);
  fs.rmSync(path.join(tmp, 'data-no-image'), { recursive: true, force: true });
  for (let i = 0; i < runs; i++) {
    const dataDir = path.join(tmp, `data-${i}`);
    fresh.push(await startOnce(dataDir, log));
    restart.push(await startOnce(dataDir, log));
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
} catch (err) {
  console.error(err);
  console.error(`server log: ${path.join(tmp, 'server.log')}`);
  process.exit(1);
}

const row = (name: string, s: Sample) =>
  `| ${name.padEnd(15)} | ${s.readyMs.toFixed(0).padStart(8)} | ${s.cpuS.toFixed(2).padStart(10)} | ${[
    s.rssMb,
    s.anonMb,
    s.peakMb,
    s.childrenMb,
    s.treeMb,
  ]
    .map((v) => v.toFixed(0).padStart(11))
    .join(' | ')} |`;
console.log(
  '\n| start           | ready ms | CPU s (*)  | idle RSS MB | anon RSS MB | peak RSS MB | children MB | tree RSS MB |',
);
console.log(
  '| --------------- | -------- | ---------- | ----------- | ----------- | ----------- | ----------- | ----------- |',
);
if (noImage) console.log(row('fresh, no image', noImage));
fresh.forEach((s, i) => {
  console.log(row(`fresh #${i + 1}`, s));
  console.log(row(`restart #${i + 1}`, restart[i] as Sample));
});
const med = (xs: Sample[]): Sample => ({
  readyMs: median(xs.map((s) => s.readyMs)),
  cpuS: median(xs.map((s) => s.cpuS)),
  rssMb: median(xs.map((s) => s.rssMb)),
  anonMb: median(xs.map((s) => s.anonMb)),
  peakMb: median(xs.map((s) => s.peakMb)),
  childrenMb: median(xs.map((s) => s.childrenMb)),
  treeMb: median(xs.map((s) => s.treeMb)),
});
const mf = med(fresh);
const mr = med(restart);
console.log(row('fresh median', mf));
console.log(row('restart median', mr));
console.log(
  '(*) CPU seconds the server and its finished children (initdb) used until /readyz: on a loaded machine the ready time measures the load, this does not',
);
console.log(
  '"fresh, no image": the first start after the cached image of a fresh database was removed (initdb and the migrations run in the child, which caches the image); the fresh starts after it are extracted from that image',
);
const verdict = (ok: boolean) => (ok ? 'met' : 'NOT met');
console.log(
  `\ntargets: ready fresh ${mf.readyMs.toFixed(0)} ms ≤ 4000 ${verdict(mf.readyMs <= 4000)}; ready restart ${mr.readyMs.toFixed(0)} ms ≤ 1500 ${verdict(mr.readyMs <= 1500)}`,
);
console.log(
  `         idle RSS fresh ${mf.rssMb.toFixed(0)} MB ≤ 250 ${verdict(mf.rssMb <= 250)}; idle RSS restart ${mr.rssMb.toFixed(0)} MB ≤ 200 ${verdict(mr.rssMb <= 200)}`,
);
log.end();
fs.rmSync(tmp, { recursive: true, force: true });
