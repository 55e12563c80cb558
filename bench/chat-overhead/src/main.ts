/**
 * `pnpm --filter @ai-suite/bench-chat-overhead bench`
 *
 * Time to first byte and total time through `POST /api/v1/chat` and the OpenAI-compatible
 * `POST /api/v1/openai/chat/completions` versus directly against the same fake upstream (a paced
 * 20-chunk stream), at concurrency 1 and 50; requests/s; server CPU time per request and peak RSS. Upstream and server each run in their own process; this
 * process only drives the load, with keep-alive connections on both paths.
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startCommand } from '@ai-suite/server/start-command';
import { type CpuSplit, cpuSnapshot, cpuSplit } from './host-cpu.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const N1 = Number(process.env.BENCH_REQUESTS_C1 ?? 400);
const N50 = Number(process.env.BENCH_REQUESTS_C50 ?? 3000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 100);
/**
 * Unmeasured requests at c=50 on every path before anything is measured. A fresh server
 * keeps compiling (V8 tiers up the code the load pattern of c=50 makes hot, ~7 % of its CPU
 * in a profile of the first 3000 requests), so without it the c=50 figures measured the
 * JIT's warm-up more than the steady state the targets are about.
 */
const WARMUP_C50 = Number(process.env.BENCH_WARMUP_C50 ?? 2000);
/** BENCH_PROF=<file>: a CPU profile of the server during the /chat run at c=50 (its CPU figure then includes the profiler). */
// BENCH_OPENAI=0 leaves the OpenAI-compatible surface out (to compare with a build that has none).
const OPENAI = process.env.BENCH_OPENAI !== '0';
const PROF = process.env.BENCH_PROF;
/** BENCH_PROF_PHASE=c1: the profile covers the /chat run at c=1 instead. */
const PROF_PHASE = process.env.BENCH_PROF_PHASE === 'c1' ? 'c1' : 'c50';
/**
 * BENCH_PERF=<file>: `perf record` of the server process during the same phase (or, with
 * BENCH_PERF_PHASE=c1, the /chat run at c=1) (real CPU
 * samples of all its threads, kernel included; add `--perf-basic-prof` to
 * BENCH_SERVER_NODE_ARGS for JavaScript names). The profiler's inspector samples wall time on
 * the main thread, so a thread preempted in a syscall shows there as time spent in it.
 */
const PERF = process.env.BENCH_PERF;
/** The measured `/chat` run BENCH_PERF records: `c50` (default) or `c1`. */
const PERF_PHASE = process.env.BENCH_PERF_PHASE === 'c1' ? 'c1' : 'c50';

async function perfRecord(pid: number, file: string): Promise<() => Promise<void>> {
  const perf = spawn('perf', ['record', '-F', '2000', '-g', '-p', String(pid), '-o', file], {
    stdio: 'ignore',
  });
  await new Promise<void>((resolve, reject) => {
    perf.once('error', (err) =>
      reject(new Error(`BENCH_PERF: cannot run perf (Debian's linux-perf): ${err.message}`)),
    );
    setTimeout(resolve, 500);
  });
  return () =>
    new Promise((resolve) => {
      perf.once('exit', () => resolve());
      perf.kill('SIGINT');
    });
}

/**
 * The server runs as `pnpm start` runs it on this database (the start script's node flags and
 * `MALLOC_ARENA_MAX`, `@ai-suite/server/start-command`). BENCH_SERVER_NODE_ARGS replaces the
 * flags ('' for node's defaults); BENCH_SERVER_ENV: `NAME=value` pairs (space-separated) set
 * for the server process only, over the start script's (`MALLOC_ARENA_MAX=1`…).
 */
const START = startCommand({ DATABASE_URL: process.env.DATABASE_URL });
const SERVER_NODE_ARGS =
  process.env.BENCH_SERVER_NODE_ARGS === undefined
    ? START.nodeArgs
    : process.env.BENCH_SERVER_NODE_ARGS.split(' ').filter(Boolean);
function serverEnv(): Record<string, string> {
  const pairs = (process.env.BENCH_SERVER_ENV ?? '').split(' ').filter(Boolean);
  return {
    ...START.env,
    ...Object.fromEntries(pairs.map((p) => [p.slice(0, p.indexOf('=')), p.slice(p.indexOf('=') + 1)])),
  };
}

function start(
  script: string,
  env: Record<string, string | undefined>,
): Promise<{ child: ChildProcess; url: string }> {
  const child = fork(path.join(here, script), [], {
    env: { ...process.env, ...env, ...(script === 'server.ts' ? serverEnv() : {}) },
    // BENCH_SERVER_NODE_ARGS: the server's node flags (`--liftoff-only --perf-basic-prof`…).
    execArgv: ['--import', 'tsx', ...(script === 'server.ts' ? SERVER_NODE_ARGS : [])],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
    child.on('message', (m: { type: string; url?: string }) => {
      if (m.type === 'ready') resolve({ child, url: m.url as string });
    });
  });
}

/** Sends `msg` and resolves with the child's first message of type `answer`. */
function ask<T extends { type: string }>(
  child: ChildProcess,
  msg: { type: string; file?: string },
  answer: string,
): Promise<T> {
  return new Promise((resolve) => {
    const on = (m: T) => {
      if (m.type !== answer) return;
      child.off('message', on);
      resolve(m);
    };
    child.on('message', on);
    child.send(msg);
  });
}

const stats = (child: ChildProcess) =>
  ask<{ type: string; cpuMicros: number; maxRssKb: number }>(child, { type: 'stats' }, 'stats');

interface Target {
  url: URL;
  headers: Record<string, string>;
  body: string;
  /**
   * For the SSE paths (direct, bare proxy): the first token is the first event carrying text.
   * The upstream opens with a role-only event before the first token; `/chat` sends plain
   * text, so its first body byte is the first token. TTFB here means time to first token.
   */
  firstToken?: RegExp;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });

/** One streamed request: time to first body byte and to the end, in ms. */
function once(t: Target): Promise<{ ttfb: number; total: number }> {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    let ttfb = -1;
    const req = http.request(
      t.url,
      { method: 'POST', agent, headers: { ...t.headers, 'content-length': Buffer.byteLength(t.body) } },
      (res) => {
        if (res.statusCode !== 200) {
          reject(new Error(`HTTP ${res.statusCode}`));
          res.resume();
          return;
        }
        res.on('data', (chunk: Buffer) => {
          if (ttfb < 0 && (!t.firstToken || t.firstToken.test(chunk.toString('latin1')))) {
            ttfb = Number(process.hrtime.bigint() - t0) / 1e6;
          }
        });
        res.on('end', () => resolve({ ttfb, total: Number(process.hrtime.bigint() - t0) / 1e6 }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(t.body);
  });
}

/** The processes whose CPU the c=50 runs split (`host-cpu.ts`); set once they are started. */
let PIDS: Record<string, number | 'self' | undefined> = {};

async function run(t: Target, total: number, concurrency: number) {
  const cpu0 = concurrency > 1 ? cpuSnapshot(PIDS) : undefined;
  const ttfb: number[] = [];
  const times: number[] = [];
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        next++;
        const r = await once(t);
        ttfb.push(r.ttfb);
        times.push(r.total);
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu: CpuSplit | undefined = cpu0 ? cpuSplit(cpu0, cpuSnapshot(PIDS), total) : undefined;
  const pct = (xs: number[], p: number) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
  };
  return {
    requests: total,
    rps: total / seconds,
    ttfbP50: pct(ttfb, 50),
    ttfbP99: pct(ttfb, 99),
    totalP50: pct(times, 50),
    totalP99: pct(times, 99),
    cpu,
  };
}

const fmt = (n: number, d = 2) => n.toFixed(d);
/** An SSE chunk event with non-empty text content. */
const FIRST_TOKEN = /"content":"[^"]/;

async function main() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-chat-'));
  // A fixed key: re-runs against the same DATABASE_URL reuse the workspace and key.
  const apiKey = `svc_ai_${'bench'.repeat(13)}0000`.slice(0, 71);
  const upstream = await start('upstream.ts', {});
  const server = await start('server.ts', {
    LOG_LEVEL: 'silent',
    DATA_DIR: dataDir,
    OPENAI_BASE_URL: upstream.url,
    OPENAI_API_KEY: 'bench',
    CHAT_MODEL: 'fake-chat',
    INIT_WORKSPACE_NAME: 'bench',
    INIT_API_KEY: apiKey,
    RATE_LIMIT_CHAT: '100000000',
    LLM_MAX_RETRIES: '0',
  });
  const bare = await start('bare-proxy.ts', { UPSTREAM_URL: upstream.url });
  PIDS = { load: 'self', upstream: upstream.child.pid, server: server.child.pid, bare: bare.child.pid };
  const messages = [{ role: 'user', content: 'Write twenty tokens.' }];
  const direct: Target = {
    url: new URL(`${upstream.url}/chat/completions`),
    headers: { 'content-type': 'application/json', authorization: 'Bearer bench' },
    body: JSON.stringify({
      model: 'fake-chat',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    }),
    firstToken: FIRST_TOKEN,
  };
  const viaChat: Target = {
    url: new URL(`${server.url}/api/v1/chat`),
    headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ messages }),
  };
  // The OpenAI-compatible surface, as an OpenAI client streams with usage.
  const viaOpenAi: Target = {
    url: new URL(`${server.url}/api/v1/openai/chat/completions`),
    headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({
      model: 'fake-chat',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    }),
    firstToken: FIRST_TOKEN,
  };
  const viaBare: Target = {
    url: new URL(`${bare.url}/chat`),
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages }),
    firstToken: FIRST_TOKEN,
  };
  try {
    for (const t of OPENAI ? [direct, viaBare, viaChat, viaOpenAi] : [direct, viaBare, viaChat]) {
      await run(t, WARMUP, 4);
      await run(t, WARMUP_C50, 50);
    }

    const b0 = await stats(bare.child);
    const p1 = await run(viaBare, N1, 1);
    const b1 = await stats(bare.child);
    const p50 = await run(viaBare, N50, 50);
    const b2 = await stats(bare.child);
    const bareCpu1 = (b1.cpuMicros - b0.cpuMicros) / 1000 / N1;
    const bareCpu50 = (b2.cpuMicros - b1.cpuMicros) / 1000 / N50;

    const d1 = await run(direct, N1, 1);
    const stopPerf1 =
      PERF && PERF_PHASE === 'c1' ? await perfRecord(server.child.pid as number, PERF) : undefined;
    if (PROF && PROF_PHASE === 'c1') await ask(server.child, { type: 'prof-start' }, 'prof-started');
    const s0 = await stats(server.child);
    const c1 = await run(viaChat, N1, 1);
    const s1 = await stats(server.child);
    if (PROF && PROF_PHASE === 'c1')
      await ask(server.child, { type: 'prof-stop', file: PROF }, 'prof-stopped');
    await stopPerf1?.();
    const d50 = await run(direct, N50, 50);
    const s2 = await stats(server.child);
    if (PROF && PROF_PHASE === 'c50') await ask(server.child, { type: 'prof-start' }, 'prof-started');
    const stopPerf =
      PERF && PERF_PHASE === 'c50' ? await perfRecord(server.child.pid as number, PERF) : undefined;
    const s2b = stopPerf ? await stats(server.child) : s2;
    const c50 = await run(viaChat, N50, 50);
    const s3 = await stats(server.child);
    await stopPerf?.();
    if (PROF && PROF_PHASE === 'c50')
      await ask(server.child, { type: 'prof-stop', file: PROF }, 'prof-stopped');

    // The OpenAI-compatible surface right after, on the same warmed server.
    const o0 = await stats(server.child);
    const oc1 = OPENAI ? await run(viaOpenAi, N1, 1) : c1;
    const o1 = await stats(server.child);
    const oc50 = OPENAI ? await run(viaOpenAi, N50, 50) : c50;
    const o2 = await stats(server.child);
    const ocpu1 = (o1.cpuMicros - o0.cpuMicros) / 1000 / N1;
    const ocpu50 = (o2.cpuMicros - o1.cpuMicros) / 1000 / N50;

    const cpu1 = (s1.cpuMicros - s0.cpuMicros) / 1000 / N1;
    const cpu50 = (s3.cpuMicros - s2b.cpuMicros) / 1000 / N50;
    const result = {
      machine: `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, Node ${process.version}`,
      database: process.env.DATABASE_URL ? 'postgresql' : 'embedded (PGlite)',
      server: `${Object.entries(serverEnv())
        .map(([k, v]) => `${k}=${v}`)
        .join(' ')} node ${SERVER_NODE_ARGS.join(' ') || '(no flags)'}`,
      concurrency1: {
        direct: d1,
        chat: c1,
        addedTtfbP50Ms: c1.ttfbP50 - d1.ttfbP50,
        addedTtfbP99Ms: c1.ttfbP99 - d1.ttfbP99,
      },
      concurrency50: { direct: d50, chat: c50, throughputRatio: c50.rps / d50.rps },
      serverCpuMsPerRequest: { concurrency1: cpu1, concurrency50: cpu50 },
      bareProxy: {
        c1: p1,
        c50: p50,
        addedTtfbP50Ms: p1.ttfbP50 - d1.ttfbP50,
        addedTtfbP99Ms: p1.ttfbP99 - d1.ttfbP99,
        throughputRatio: p50.rps / d50.rps,
        cpuMsPerRequest: { concurrency1: bareCpu1, concurrency50: bareCpu50 },
      },
      openai: {
        c1: oc1,
        c50: oc50,
        addedTtfbP50OverChatMs: oc1.ttfbP50 - c1.ttfbP50,
        addedTtfbP99OverChatMs: oc1.ttfbP99 - c1.ttfbP99,
        throughputRatio: oc50.rps / d50.rps,
        cpuMsPerRequest: { concurrency1: ocpu1, concurrency50: ocpu50 },
      },
      serverPeakRssMb: o2.maxRssKb / 1024,
    };
    const line = (name: string, r: typeof d1) =>
      `| ${name} | ${fmt(r.ttfbP50)} | ${fmt(r.ttfbP99)} | ${fmt(r.totalP50)} | ${fmt(r.totalP99)} | ${fmt(r.rps, 0)} |`;
    console.log(`\n${result.machine}; database: ${result.database}; server: ${result.server}`);
    console.log('\n| path | TTFB p50 ms | TTFB p99 ms | total p50 ms | total p99 ms | req/s |');
    console.log('|---|---|---|---|---|---|');
    console.log(line(`direct, c=1 (${N1})`, d1));
    console.log(line(`bare node:http proxy, c=1`, p1));
    console.log(line(`/chat, c=1 (${N1})`, c1));
    console.log(line(`direct, c=50 (${N50})`, d50));
    console.log(line(`bare node:http proxy, c=50`, p50));
    console.log(line(`/chat, c=50 (${N50})`, c50));
    if (OPENAI) {
      console.log(line(`/openai/chat/completions, c=1`, oc1));
      console.log(line(`/openai/chat/completions, c=50`, oc50));
    }
    // Where the host's CPU went in each c=50 run: the load, the upstream, the server, the bare
    // proxy and PostgreSQL, per request; with the host's busy share of both cores.
    if (d50.cpu) {
      const ms = (r: typeof d50, k: string) => fmt(r.cpu?.perRequestMs[k] ?? 0, 3);
      console.log('\n| c=50 run | load ms/req | upstream | server | bare proxy | PostgreSQL | host busy |');
      console.log('|---|---|---|---|---|---|---|');
      const runs: [string, typeof d50][] = [
        ['direct', d50],
        ['bare proxy', p50],
        ['/chat', c50],
        ...(OPENAI ? ([['/openai/chat/completions', oc50]] as [string, typeof d50][]) : []),
      ];
      for (const [name, r] of runs) {
        console.log(
          `| ${name} | ${ms(r, 'load')} | ${ms(r, 'upstream')} | ${ms(r, 'server')} | ${ms(r, 'bare')} | ${ms(r, 'database')} | ${fmt(r.cpu?.hostBusyPct ?? 0, 0)} % |`,
        );
      }
    }
    console.log(
      `\nadded TTFB at c=1: p50 ${fmt(result.concurrency1.addedTtfbP50Ms)} ms (target ≤ 3), p99 ${fmt(result.concurrency1.addedTtfbP99Ms)} ms (target ≤ 10)`,
    );
    console.log(`throughput at c=50: ${fmt(result.concurrency50.throughputRatio)} × direct (target ≥ 0.85)`);
    console.log(
      `server CPU per 20-token stream: ${fmt(cpu1, 3)} ms at c=1, ${fmt(cpu50, 3)} ms at c=50 (target ≤ 1)`,
    );
    console.log(
      `OpenAI-compatible surface: added TTFB over /chat at c=1 p50 ${fmt(result.openai.addedTtfbP50OverChatMs)} ms (target ≤ 1), p99 ${fmt(result.openai.addedTtfbP99OverChatMs)} ms; throughput at c=50 ${fmt(result.openai.throughputRatio)} × direct (target ≥ 0.92); CPU ${fmt(ocpu1, 3)} ms (c=1), ${fmt(ocpu50, 3)} ms (c=50) per stream`,
    );
    console.log(`server peak RSS: ${fmt(result.serverPeakRssMb, 0)} MB`);
    console.log(
      `reference, bare proxy: added TTFB p50 ${fmt(result.bareProxy.addedTtfbP50Ms)} ms, p99 ${fmt(result.bareProxy.addedTtfbP99Ms)} ms; throughput ${fmt(result.bareProxy.throughputRatio)} × direct; CPU ${fmt(bareCpu1, 3)} ms (c=1), ${fmt(bareCpu50, 3)} ms (c=50) per stream`,
    );
    console.log(
      `load average during the run: ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    );
    if (process.env.BENCH_JSON) fs.writeFileSync(process.env.BENCH_JSON, JSON.stringify(result, null, 2));
  } finally {
    agent.destroy();
    server.child.disconnect();
    bare.child.disconnect();
    upstream.child.disconnect();
    await new Promise((r) => server.child.once('exit', r));
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
