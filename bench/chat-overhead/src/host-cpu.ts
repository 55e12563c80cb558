/**
 * Where the host's CPU goes during a phase: each process of the bench (the load itself, the
 * fake upstream, the server, the bare proxy), the PostgreSQL server's processes, and the host
 * as a whole (busy share of all cores). Read from `/proc` (Linux only; elsewhere `undefined`),
 * in clock ticks, so a phase of a few seconds is exact to ~10 ms.
 */
import fs from 'node:fs';
import os from 'node:os';

const TICK_MS = 10; // USER_HZ is 100 on Linux

/** utime + stime of one process, in ms; 0 once it is gone. */
function processMs(pid: number | 'self'): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'latin1');
    // Fields after the command name, which is in parentheses and may hold spaces.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * TICK_MS;
  } catch {
    return 0;
  }
}

/** Every process whose command is `postgres` (the server and its backends), in ms. */
function postgresMs(): number {
  let ms = 0;
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (fs.readFileSync(`/proc/${name}/comm`, 'latin1').trim() !== 'postgres') continue;
    } catch {
      continue;
    }
    ms += processMs(Number(name));
  }
  return ms;
}

/** The host's busy and total time over all cores, in ms. */
function hostMs(): { busy: number; total: number } {
  const cpu = fs
    .readFileSync('/proc/stat', 'latin1')
    .split('\n')[0]
    ?.trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  if (!cpu) return { busy: 0, total: 0 };
  const total = cpu.reduce((a, b) => a + b, 0);
  const idle = (cpu[3] ?? 0) + (cpu[4] ?? 0); // idle + iowait
  return { busy: (total - idle) * TICK_MS, total: total * TICK_MS };
}

export interface CpuSnapshot {
  at: number;
  procs: Record<string, number>;
  postgres: number;
  host: { busy: number; total: number };
}

export function cpuSnapshot(pids: Record<string, number | 'self' | undefined>): CpuSnapshot | undefined {
  if (os.platform() !== 'linux') return undefined;
  const procs: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) if (pid !== undefined) procs[name] = processMs(pid);
  return { at: performance.now(), procs, postgres: postgresMs(), host: hostMs() };
}

/** ms of CPU per request of each process and the database, and the host's busy share. */
export interface CpuSplit {
  perRequestMs: Record<string, number>;
  hostBusyPct: number;
}

export function cpuSplit(
  a: CpuSnapshot | undefined,
  b: CpuSnapshot | undefined,
  requests: number,
): CpuSplit | undefined {
  if (!a || !b) return undefined;
  const perRequestMs: Record<string, number> = {};
  for (const name of Object.keys(a.procs))
    perRequestMs[name] = ((b.procs[name] ?? 0) - (a.procs[name] ?? 0)) / requests;
  perRequestMs.database = (b.postgres - a.postgres) / requests;
  const total = b.host.total - a.host.total;
  return { perRequestMs, hostBusyPct: total > 0 ? (100 * (b.host.busy - a.host.busy)) / total : 0 };
}
