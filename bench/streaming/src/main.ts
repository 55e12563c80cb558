/**
 * `pnpm --filter @ai-suite/bench-streaming bench` (embedded database), or with
 * `DATABASE_URL=postgres://…/anydb` (a fresh database is created beside it and dropped after).
 *
 * Four streaming paths against the same paced fake upstream (20 tokens over ~120 ms), each at
 * concurrency 1 and 50: the upstream called directly, `POST /chat`, the app chat stream
 * (`POST /apps/{id}/chat/message/stream`) and an agent assist turn
 * (`POST /managed-agents/sessions/{id}/messages`, one session per concurrent client). Reports
 * time to first text and total time (p50/p99), requests/s, server CPU and database CPU per
 * request (the /proc times of every backend of the bench database, listed every 200 ms during
 * each phase; on PGlite the database runs in
 * the server process, inside its CPU) and database transactions per request
 * (`pg_stat_database` deltas). Upstream and server run in their own processes. The fake
 * upstream keeps its rate (`BENCH_PACE_SCHEDULE=rate`; `gaps`: 6 ms after each chunk written)
 * and reports how late its replies ended (p50/p99 of each phase's replies: its own share of
 * the host's contention, charged to every path alike). `BENCH_COMPARE_PACE=gaps|rate` gives
 * B a second fake upstream paced the other way, with its own direct baseline (`direct [B]`).
 *
 * `BENCH_ROUNDS=n` measures the c=50 phases n times, each round every path in turn, and
 * reports each figure's median over the rounds with the range of × direct (each round's
 * throughput against direct's in the same round): on a shared machine whose speed drifts by
 * tens of percent from minute to minute, one phase is one sample. `BENCH_COMPARE_ENV='NAME=value
 * …'` starts a second server (B, its own database) with those settings beside the first (A):
 * every path is measured on both, their order alternating from round to round — an A/B of a
 * setting under the same drift. `BENCH_COMPARE_DIST=<dir>` gives B another build of the server
 * (its `dist`, e.g. from a second worktree), `BENCH_COMPARE_NODE_ARGS` node options of its own.
 * `BENCH_SERVER_CPUS=<list>` pins every thread of the server to those CPUs (`taskset`), as
 * issue 20 measured; `BENCH_COMPARE_CPUS` pins B alone. Each phase also reports the CPU its
 * load costs (this process's clients and the fake upstream, per request) and how busy the
 * whole host was (/proc/stat): on a small host the paths share its cores with the load.
 * The server runs as `pnpm start` runs it (the start script's node flags and
 * `MALLOC_ARENA_MAX`, `@ai-suite/server/start-command`); `BENCH_SERVER_NODE_ARGS` replaces
 * those flags (`''`: node's defaults).
 */
import { type ChildProcess, execFileSync, fork } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startCommand } from '@ai-suite/server/start-command';
import pg from 'pg';

const here = path.dirname(fileURLToPath(import.meta.url));
const N1 = Number(process.env.BENCH_REQUESTS_C1 ?? 100);
const N50 = Number(process.env.BENCH_REQUESTS_C50 ?? 1000);
const WARMUP_C50 = Number(process.env.BENCH_WARMUP_C50 ?? 500);
/** pg_stat_database is flushed by each backend at most every second, idle ones within 10 s. */
const STATS_SETTLE_MS = Number(process.env.BENCH_STATS_SETTLE_MS ?? 11_000);
const ONLY = process.env.BENCH_PATHS?.split(',');
/**
 * What `pnpm start` runs node with on this database (the server's start script, expanded:
 * `MALLOC_ARENA_MAX=2 node --liftoff-only`, and `--max-semi-space-size=4` on the embedded one).
 */
const START = startCommand({
  DATABASE_URL: process.env.DATABASE_URL,
  MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX,
});
/** What every path asks the fake upstream for (it answers 20 paced tokens whatever it is). */
const PROMPT = 'Write twenty tokens.';
const MESSAGES = [{ role: 'user', content: PROMPT }];

function start(script: string, env: Record<string, string | undefined>, nodeArgs: string[] = []) {
  const child = fork(path.join(here, script), [], {
    env: { ...process.env, ...env },
    execArgv: ['--import', 'tsx', ...nodeArgs],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise<{ child: ChildProcess; url: string }>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
    child.on('message', (m: { type: string; url?: string }) => {
      if (m.type === 'ready') resolve({ child, url: m.url as string });
    });
  });
}

function ask<T extends { type: string }>(child: ChildProcess, type: string): Promise<T> {
  return new Promise((resolve) => {
    const on = (m: T) => {
      if (m.type !== type) return;
      child.off('message', on);
      resolve(m);
    };
    child.on('message', on);
    child.send({ type });
  });
}

/** utime + stime of these processes, in ms (0 for a process that is gone). */
function procCpuMs(pids: number[]): number {
  const tick = 100; // USER_HZ on Linux
  let sum = 0;
  for (const pid of pids) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      sum += ((Number(f[11]) + Number(f[12])) * 1000) / tick;
    } catch {
      /* gone */
    }
  }
  return sum;
}

interface DbCounts {
  type: string;
  xacts: number;
  pids: number[];
  rows: Record<string, number>;
}

const sum = (m: Record<string, number>) => Object.values(m).reduce((a, b) => a + b, 0);

/** Rows written per table between two readings (tables absent from either count from zero). */
function rowDeltas(a: Record<string, number>, b: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(b).map(([t, n]) => [t, n - (a[t] ?? 0)]));
}

/** The host's CPU time (all cores, in USER_HZ ticks): busy and in all, from /proc/stat. */
function hostCpu(): { busy: number; total: number } {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal (guest time is counted in user already)
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
  return { busy: total - (f[3] ?? 0) - (f[4] ?? 0), total };
}

/**
 * CPU of every backend of the bench database over a phase. Backends come and go (the plain
 * pool closes idle connections after 10 s, so a phase's connections may be opened after its
 * start and closed before the stats settle): the backends are listed every `everyMs` while
 * the phase runs and each one's CPU is read at every listing; a backend first seen during the
 * phase counts from zero. Only the CPU a backend spends between its last reading and its exit
 * is missed (none for the pools' connections, which outlive the phase).
 */
class BackendCpu {
  private readonly base = new Map<number, number>();
  private readonly last = new Map<number, number>();
  private timer: NodeJS.Timeout | undefined;
  private busy = false;

  constructor(private readonly client: pg.Client) {}

  private async sample(first: boolean): Promise<void> {
    const { rows } = await this.client.query<{ pid: number }>(
      'select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()',
    );
    for (const { pid } of rows) {
      const cpu = procCpuMs([pid]);
      if (!this.base.has(pid)) this.base.set(pid, first ? cpu : 0);
      this.last.set(pid, Math.max(this.last.get(pid) ?? 0, cpu));
    }
  }

  async start(everyMs = 200): Promise<void> {
    await this.sample(true);
    this.timer = setInterval(() => {
      if (this.busy) return;
      this.busy = true;
      void this.sample(false).finally(() => {
        this.busy = false;
      });
    }, everyMs);
  }

  /** CPU ms of the phase's backends; `backends` = how many were seen. */
  async stop(): Promise<{ ms: number; backends: number }> {
    clearInterval(this.timer);
    while (this.busy) await new Promise((r) => setTimeout(r, 10));
    await this.sample(false);
    let ms = 0;
    for (const [pid, base] of this.base) ms += (this.last.get(pid) ?? base) - base;
    return { ms, backends: this.base.size };
  }
}

interface Target {
  name: string;
  /** Built per request: `i` is the concurrent client's index (its own agent session). */
  request: (client: number) => { url: URL; headers: Record<string, string>; body: string };
  /** The first chunk carrying text (an SSE event with content). */
  firstText: RegExp;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });

function once(t: Target, client: number): Promise<{ ttfb: number; total: number }> {
  const { url, headers, body } = t.request(client);
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    let ttfb = -1;
    let seen = '';
    const req = http.request(
      url,
      { method: 'POST', agent, headers: { ...headers, 'content-length': Buffer.byteLength(body) } },
      (res) => {
        if (res.statusCode !== 200) {
          let text = '';
          res.on('data', (c) => {
            text += c;
          });
          res.on('end', () => reject(new Error(`${t.name}: HTTP ${res.statusCode} ${text}`)));
          return;
        }
        res.on('data', (chunk: Buffer) => {
          if (ttfb >= 0) return;
          seen = (seen + chunk.toString('latin1')).slice(-4096);
          if (t.firstText.test(seen)) ttfb = Number(process.hrtime.bigint() - t0) / 1e6;
        });
        res.on('end', () => {
          if (ttfb < 0) reject(new Error(`${t.name}: no text in the stream: ${seen.slice(-600)}`));
          else resolve({ ttfb, total: Number(process.hrtime.bigint() - t0) / 1e6 });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
};

async function load(t: Target, total: number, concurrency: number) {
  const ttfb: number[] = [];
  const times: number[] = [];
  /** Per request: start (ms since the phase began), first text, total (ms). */
  const samples: [number, number, number][] = [];
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, client) => {
      while (next < total) {
        next++;
        const startedAt = Number(process.hrtime.bigint() - t0) / 1e6;
        const r = await once(t, client);
        samples.push([startedAt, r.ttfb, r.total]);
        ttfb.push(r.ttfb);
        times.push(r.total);
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  return {
    rps: total / seconds,
    ttfbP50: pct(ttfb, 50),
    ttfbP99: pct(ttfb, 99),
    totalP50: pct(times, 50),
    totalP99: pct(times, 99),
    samples,
  };
}

async function json(url: string, key: string, body: unknown): Promise<any> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return res.json();
}

const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : 'n/a');

/** `BENCH_COMPARE_ENV='A=1 B=2'`: settings of a second server measured beside the first. */
function parseEnvList(text: string | undefined): Record<string, string> | undefined {
  if (!text?.trim()) return undefined;
  const out: Record<string, string> = {};
  for (const pair of text.trim().split(/\s+/)) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`BENCH_COMPARE_ENV: "${pair}" is not NAME=value`);
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

/**
 * The host's speed now: the fastest of three runs of a fixed loop in this process (ms, lower
 * is faster), taken while nothing of the bench runs. The machine is a VM whose cores are
 * shared with other tenants, and this loop has taken from 135 to 344 ms on it within a few
 * hours, so a run's figures are read against it.
 */
function hostSpeedMs(): number {
  let best = Number.POSITIVE_INFINITY;
  for (let k = 0; k < 3; k++) {
    const t0 = process.hrtime.bigint();
    let x = 0;
    for (let i = 0; i < 100_000_000; i++) x += i % 7;
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (x > 0) best = Math.min(best, ms);
  }
  return best;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
};

/** One server under test: its process, database, data directory and the targets it serves. */
interface Subject {
  label: string;
  server: { child: ChildProcess; url: string };
  watcher: pg.Client | undefined;
  targets: Target[];
  stop(): Promise<void>;
}

async function startSubject(
  label: string,
  serverDb: string | undefined,
  upstreamUrl: string,
  apiKey: string,
  extraEnv: Record<string, string>,
  nodeArgs: string[],
  cpus: string | undefined,
): Promise<Subject> {
  let dbUrl: string | undefined;
  let dropDb: (() => Promise<void>) | undefined;
  if (serverDb) {
    const name = `bench_streaming_${Date.now()}_${label.replace(/\W/g, '').toLowerCase()}`;
    const admin = new pg.Client({ connectionString: serverDb });
    await admin.connect();
    await admin.query(`create database ${name}`);
    await admin.end();
    const u = new URL(serverDb);
    u.pathname = `/${name}`;
    dbUrl = u.toString();
    dropDb = async () => {
      const c = new pg.Client({ connectionString: serverDb });
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`);
      await c.end();
    };
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-streaming-'));
  let server: { child: ChildProcess; url: string } | undefined;
  let watcher: pg.Client | undefined;
  const stop = async () => {
    await watcher?.end();
    if (server?.child.connected) {
      const exited = new Promise((r) => server?.child.once('exit', r));
      server.child.disconnect();
      await exited;
    }
    fs.rmSync(dataDir, { recursive: true, force: true });
    await dropDb?.();
  };
  try {
    server = await start(
      'server.ts',
      {
        LOG_LEVEL: 'silent',
        DATA_DIR: dataDir,
        DATABASE_URL: dbUrl,
        OPENAI_BASE_URL: upstreamUrl,
        OPENAI_API_KEY: 'bench',
        CHAT_MODEL: 'fake-chat',
        INIT_WORKSPACE_NAME: 'bench',
        INIT_API_KEY: apiKey,
        INIT_CREDITS_USD: '1000000',
        RATE_LIMIT_CHAT: '100000000',
        RATE_LIMIT_APP_CHAT: '100000000',
        RATE_LIMIT_AGENT_MESSAGE: '100000000',
        RATE_LIMIT_SESSION_CREATE: '100000000',
        LLM_MAX_RETRIES: '0',
        ...START.env,
        ...extraEnv,
      },
      nodeArgs,
    );
    // Pinned, every thread of it (threads started later inherit the mask), as issue 20 measured.
    if (cpus && server.child.pid) execFileSync('taskset', ['-a', '-cp', cpus, String(server.child.pid)]);
    // The bench's own connection, listing the database's backends (itself excluded).
    watcher = dbUrl ? new pg.Client({ connectionString: dbUrl }) : undefined;
    await watcher?.connect();
    const api = `${server.url}/api/v1`;
    const created = await json(`${api}/managed-agents/agents`, apiKey, { name: 'bench agent' });
    const agentId = created.agent.id as string;
    const sessions: string[] = [];
    for (let i = 0; i < 50; i++) {
      const s = await json(`${api}/managed-agents/agents/${agentId}/sessions`, apiKey, {});
      sessions.push(s.session.id);
    }
    const app = await json(`${api}/apps`, apiKey, { name: 'bench app' });
    const appId = app.app.id as string;
    const auth = { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` };
    const targets: Target[] = [
      {
        name: '/chat',
        request: () => ({
          url: new URL(`${api}/chat`),
          headers: auth,
          body: JSON.stringify({ messages: MESSAGES }),
        }),
        firstText: /tok/,
      },
      {
        name: 'app chat stream',
        request: () => ({
          url: new URL(`${api}/apps/${appId}/chat/message/stream`),
          headers: auth,
          body: JSON.stringify({ message: PROMPT, role: 'student' }),
        }),
        firstText: /"type":"token"/,
      },
      {
        name: 'agent assist turn',
        request: (client) => ({
          url: new URL(`${api}/managed-agents/sessions/${sessions[client]}/messages`),
          headers: auth,
          body: JSON.stringify({ message: PROMPT }),
        }),
        firstText: /event: message\.delta/,
      },
    ];
    return { label, server, watcher, targets, stop };
  } catch (err) {
    // A failed set-up stops what it started (the server process included) before it throws.
    await stop();
    throw err;
  }
}

async function main() {
  const serverDb = process.env.DATABASE_URL;
  const rounds = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 1) || 1);
  const compareEnv = parseEnvList(process.env.BENCH_COMPARE_ENV);
  const apiKey = `svc_ai_${'bench'.repeat(13)}0000`.slice(0, 71);
  // The same fake upstream as bench/chat-overhead, 20 chunks at one per 6 ms (about 120 ms per
  // reply) unless BENCH_PACE_MS says otherwise, kept at that rate (`BENCH_PACE_SCHEDULE=rate`,
  // the default here): it shares the host's cores with the paths measured, and with `gaps`
  // (6 ms after each chunk written) its late timers piled up into every reply, more on the
  // paths that load the host more (decision 0037).
  const paceSchedule = process.env.BENCH_PACE_SCHEDULE ?? 'rate';
  const startUpstream = (schedule: string) =>
    start('../../chat-overhead/src/upstream.ts', {
      BENCH_PACE_MS: process.env.BENCH_PACE_MS ?? '6',
      BENCH_PACE_SCHEDULE: schedule,
    });
  const upstream = await startUpstream(paceSchedule);
  // `BENCH_COMPARE_PACE=gaps|rate`: B's server talks to a second fake upstream paced the
  // other way, and direct is measured on both (`direct [B]` is B's baseline).
  const comparePace = process.env.BENCH_COMPARE_PACE?.trim() || undefined;
  const upstreamB = comparePace ? await startUpstream(comparePace) : undefined;
  const upstreamPids = [upstream.child.pid ?? 0, upstreamB?.child.pid ?? 0].filter((p) => p > 0);
  const subjects: Subject[] = [];
  try {
    const args = (v: string | undefined) => v?.split(' ').filter(Boolean) ?? [];
    // The server runs as `pnpm start` runs it (START): BENCH_SERVER_NODE_ARGS replaces the
    // flags ('' for node's defaults), MALLOC_ARENA_MAX in the bench's environment the arenas.
    const baseArgs =
      process.env.BENCH_SERVER_NODE_ARGS === undefined
        ? START.nodeArgs
        : args(process.env.BENCH_SERVER_NODE_ARGS);
    const compareDist = process.env.BENCH_COMPARE_DIST?.trim();
    const compareArgs = args(process.env.BENCH_COMPARE_NODE_ARGS);
    const cpus = process.env.BENCH_SERVER_CPUS?.trim() || undefined;
    const compareCpus = process.env.BENCH_COMPARE_CPUS?.trim() || undefined;
    // What B has that A has not, as the table's note says it (none: no B).
    const compared = [
      process.env.BENCH_COMPARE_ENV?.trim(),
      compareDist && `the server of ${compareDist}`,
      compareArgs.length > 0 && `node ${compareArgs.join(' ')}`,
      compareCpus && `the server pinned to CPUs ${compareCpus}`,
      comparePace && `a fake upstream paced by ${comparePace}`,
    ].filter(Boolean);
    subjects.push(
      await startSubject(compared.length > 0 ? 'A' : '', serverDb, upstream.url, apiKey, {}, baseArgs, cpus),
    );
    if (compared.length > 0) {
      const env = { ...compareEnv, ...(compareDist ? { BENCH_SERVER_DIST: path.resolve(compareDist) } : {}) };
      subjects.push(
        await startSubject(
          'B',
          serverDb,
          (upstreamB ?? upstream).url,
          apiKey,
          env,
          [...baseArgs, ...compareArgs],
          compareCpus ?? cpus,
        ),
      );
    }
    const direct: Target = {
      name: 'direct',
      request: () => ({
        url: new URL(`${upstream.url}/chat/completions`),
        headers: { 'content-type': 'application/json', authorization: 'Bearer bench' },
        body: JSON.stringify({ model: 'fake-chat', messages: MESSAGES, stream: true }),
      }),
      firstText: /"content":"[^"]/,
    };
    const directB: Target | undefined = upstreamB && {
      ...direct,
      name: 'direct [B]',
      request: () => ({ ...direct.request(0), url: new URL(`${upstreamB.url}/chat/completions`) }),
    };
    /** The fake upstream a phase talks to. */
    const upstreamOf = (p: { target: Target; subject: Subject | undefined }) =>
      upstreamB && (p.target === directB || p.subject?.label === 'B') ? upstreamB : upstream;
    /** A phase's baseline: direct on the same fake upstream. */
    const directName = (path: string) => (upstreamB && path.endsWith(' [B]') ? 'direct [B]' : 'direct');
    const want = (name: string) => !ONLY || ONLY.includes(name);
    // Every measured phase: a path on one subject (direct on none) at one concurrency.
    type Phase = { target: Target; subject: Subject | undefined };
    const phasesOf = (order: Subject[]): Phase[] => {
      const out: Phase[] = want('direct') ? [{ target: direct, subject: undefined }] : [];
      if (directB && want('direct')) out.push({ target: directB, subject: undefined });
      for (let i = 0; i < subjects[0]!.targets.length; i++) {
        for (const subject of order) {
          const target = subject.targets[i]!;
          if (want(target.name)) out.push({ target, subject });
        }
      }
      return out;
    };
    const label = (p: Phase) => (p.subject?.label ? `${p.target.name} [${p.subject.label}]` : p.target.name);

    for (const p of phasesOf(subjects)) {
      await load(p.target, 20, 1);
      await load(p.target, WARMUP_C50, 50);
    }
    const results: Record<string, any>[] = [];
    const samples: Record<string, [number, number, number][]> = {};
    const measure = async (p: Phase, c: number, n: number, round: number, settle: boolean) => {
      // Database figures come from the subject measured (direct: from the first one's, idle).
      const s = p.subject ?? subjects[0]!;
      if (serverDb && settle) await new Promise((r) => setTimeout(r, STATS_SETTLE_MS));
      const db0 = await ask<DbCounts>(s.server.child, 'db');
      const backendCpu = s.watcher ? new BackendCpu(s.watcher) : undefined;
      await backendCpu?.start();
      const s0 = await ask<{ type: string; cpuMicros: number }>(s.server.child, 'stats');
      // The load's own side: this process (the clients) and the fake upstream.
      const own0 = process.cpuUsage();
      const up0 = procCpuMs(upstreamPids);
      const h0 = hostCpu();
      const up = upstreamOf(p);
      await ask(up.child, 'late');
      const w0 = Date.now();
      // A failed request ends the bench with its error (the sampler stopped first, so that
      // error is the one reported).
      const r = await load(p.target, n, c).catch(async (err: unknown) => {
        await backendCpu?.stop();
        throw err;
      });
      const seconds = (Date.now() - w0) / 1000;
      const h1 = hostCpu();
      const late = await ask<{ type: string; p50: number; p99: number }>(up.child, 'late');
      const own = process.cpuUsage(own0);
      const loadCpuMs = (own.user + own.system) / 1000 + procCpuMs(upstreamPids) - up0;
      samples[`${label(p)} c=${c}${rounds > 1 ? ` round ${round}` : ''}`] = r.samples;
      const s1 = await ask<{ type: string; cpuMicros: number }>(s.server.child, 'stats');
      const dbCpu = await backendCpu?.stop();
      if (serverDb && settle) await new Promise((r) => setTimeout(r, STATS_SETTLE_MS));
      const db1 = await ask<DbCounts>(s.server.child, 'db');
      results.push({
        path: label(p),
        concurrency: c,
        round,
        requests: n,
        rps: r.rps,
        ttfbP50: r.ttfbP50,
        ttfbP99: r.ttfbP99,
        totalP50: r.totalP50,
        totalP99: r.totalP99,
        upstreamLateP50: late.p50,
        upstreamLateP99: late.p99,
        serverCpuMs: p.subject ? (s1.cpuMicros - s0.cpuMicros) / 1000 / n : 0,
        dbCpuMs: dbCpu ? dbCpu.ms / n : Number.NaN,
        dbBackends: dbCpu?.backends ?? 0,
        loadCpuMs: loadCpuMs / n,
        hostBusyPct: (100 * (h1.busy - h0.busy)) / Math.max(1, h1.total - h0.total),
        seconds,
        // Minus the statement that read the counter the first time; measured in round 1 only
        // (the counters need STATS_SETTLE_MS on each side of a phase).
        xacts: settle ? db1.xacts - db0.xacts - 1 : Number.NaN,
        // Rows written per table over the phase (round 1 only, as the transactions; on the
        // server only: PGlite's counters are flushed at its own pace, not by the settle wait).
        rows: settle && serverDb ? rowDeltas(db0.rows, db1.rows) : undefined,
        dbXactsPerRequest: Number.NaN,
      });
    };
    // c=1 once; c=50 in rounds, each round every path on every subject, the subjects' order
    // alternating from round to round (A B, then B A), so a drift of the machine's speed
    // during the run falls on both.
    for (const p of phasesOf(subjects)) await measure(p, 1, N1, 1, true);
    const speeds: number[] = [];
    for (let round = 1; round <= rounds; round++) {
      speeds.push(hostSpeedMs());
      const order = round % 2 === 1 ? subjects : [...subjects].reverse();
      for (const p of phasesOf(order)) await measure(p, 50, N50, round, round === 1);
    }
    // Idle work of the server (run workers' and the webhook poller's polls, ~1 per second
    // each) measured while only the direct path ran, subtracted from every path.
    for (const r of results) {
      if (!Number.isFinite(r.xacts)) continue;
      const d = results.find((x) => x.path === 'direct' && x.concurrency === r.concurrency && x.round === 1);
      const idlePerSecond = d ? d.xacts / d.seconds : 0;
      r.dbXactsPerRequest = Math.max(0, r.xacts - idlePerSecond * r.seconds) / r.requests;
      const idleRows = d?.rows ? sum(d.rows) / d.seconds : 0;
      if (r.rows) {
        r.dbRowsPerRequest = Math.max(0, sum(r.rows) - idleRows * r.seconds) / r.requests;
        r.rowsPerRequestByTable = Object.fromEntries(
          Object.entries(r.rows as Record<string, number>)
            .filter(([, n]) => n > 0)
            .map(([t, n]) => [t, Number((n / r.requests).toFixed(2))]),
        );
      }
    }
    // Each phase against direct in the same round.
    for (const r of results) {
      const d = results.find(
        (x) => x.path === directName(r.path) && x.concurrency === r.concurrency && x.round === r.round,
      );
      r.xDirect = d ? r.rps / d.rps : Number.NaN;
      r.addedP50 = r.ttfbP50 - (d?.ttfbP50 ?? 0);
      r.addedP99 = r.ttfbP99 - (d?.ttfbP99 ?? 0);
    }
    const notes = [
      `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, Node ${process.version}`,
      `database: ${serverDb ? 'PostgreSQL server' : 'embedded (PGlite)'}`,
      `server: ${Object.entries(START.env)
        .map(([k, v]) => `${k}=${v} `)
        .join('')}node ${baseArgs.join(' ') || '(no flags)'}`,
      `fake upstream paced by ${paceSchedule === 'rate' ? 'rate' : 'gaps'}`,
      `host speed ${speeds.map((v) => v.toFixed(0)).join(' / ')} ms a round (a fixed loop, lower is faster)`,
      `load average ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
      ...(subjects.length > 1 ? [`B = A with ${compared.join(', ')}`] : []),
      ...(rounds > 1 ? [`c=50: median of ${rounds} rounds (range of × direct in brackets)`] : []),
    ];
    console.log(`\n${notes.join('; ')}`);
    console.log(
      '\n| path | c | first text p50 / p99 ms | added p50 / p99 ms | total p50 / p99 ms | upstream late p50 / p99 ms | req/s | × direct | server CPU ms/req | DB CPU ms/req | DB xacts/req | DB rows written/req | clients + upstream CPU ms/req | host CPU busy |',
    );
    console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
    const summary: Record<string, any>[] = [];
    for (const c of [1, 50]) {
      const names = [...new Set(results.filter((r) => r.concurrency === c).map((r) => r.path as string))];
      for (const name of names) {
        const rs = results.filter((r) => r.concurrency === c && r.path === name);
        const m = (k: string) => median(rs.map((r) => r[k] as number));
        const xs = rs.map((r) => r.xDirect as number);
        const row = {
          path: name,
          concurrency: c,
          rounds: rs.length,
          ttfbP50: m('ttfbP50'),
          ttfbP99: m('ttfbP99'),
          addedP50: m('addedP50'),
          addedP99: m('addedP99'),
          totalP50: m('totalP50'),
          totalP99: m('totalP99'),
          upstreamLateP50: m('upstreamLateP50'),
          upstreamLateP99: m('upstreamLateP99'),
          rps: m('rps'),
          xDirect: median(xs),
          xDirectMin: Math.min(...xs),
          xDirectMax: Math.max(...xs),
          serverCpuMs: m('serverCpuMs'),
          dbCpuMs: m('dbCpuMs'),
          loadCpuMs: m('loadCpuMs'),
          hostBusyPct: m('hostBusyPct'),
          dbXactsPerRequest: rs[0]?.dbXactsPerRequest as number,
          dbRowsPerRequest: (rs[0]?.dbRowsPerRequest as number) ?? Number.NaN,
          rowsPerRequestByTable: rs[0]?.rowsPerRequestByTable,
        };
        summary.push(row);
        const range = rs.length > 1 ? ` (${fmt(row.xDirectMin, 2)}–${fmt(row.xDirectMax, 2)})` : '';
        console.log(
          `| ${name} | ${c} | ${fmt(row.ttfbP50)} / ${fmt(row.ttfbP99)} | ${fmt(row.addedP50)} / ${fmt(row.addedP99)} | ${fmt(row.totalP50)} / ${fmt(row.totalP99)} | ${fmt(row.upstreamLateP50)} / ${fmt(row.upstreamLateP99)} | ${fmt(row.rps, 0)} | ${fmt(row.xDirect, 2)}${range} | ${fmt(row.serverCpuMs, 2)} | ${fmt(row.dbCpuMs, 2)} | ${fmt(row.dbXactsPerRequest, 1)} | ${fmt(row.dbRowsPerRequest, 1)} | ${fmt(row.loadCpuMs, 2)} | ${fmt(row.hostBusyPct, 0)} % |`,
        );
      }
    }
    const byTable = summary.filter((r) => r.concurrency === 50 && r.rowsPerRequestByTable);
    if (byTable.length > 0)
      console.log('\nRows written per request at c=50, by table (round 1, idle not subtracted):');
    for (const r of byTable) {
      const t = Object.entries(r.rowsPerRequestByTable as Record<string, number>).sort((a, b) => b[1] - a[1]);
      if (t.length > 0) console.log(`- ${r.path}: ${t.map(([k, n]) => `${k} ${n}`).join(', ')}`);
    }
    if (process.env.BENCH_JSON)
      fs.writeFileSync(process.env.BENCH_JSON, JSON.stringify({ summary, results, speeds }, null, 2));
    // Every measured request as [start ms into its phase, first text ms, total ms], per phase:
    // shows whether slow requests are spread out or come together (a phase's first wave).
    if (process.env.BENCH_SAMPLES) fs.writeFileSync(process.env.BENCH_SAMPLES, JSON.stringify(samples));
  } finally {
    agent.destroy();
    for (const s of subjects) await s.stop();
    upstream.child.disconnect();
    upstreamB?.child.disconnect();
  }
}

await main();
