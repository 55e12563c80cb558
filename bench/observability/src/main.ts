/**
 * `pnpm --filter @ai-suite/bench-observability bench`
 *
 * What metrics and tracing cost the server: three server processes on the same fake upstream,
 * one with telemetry off, one with the Prometheus metrics on (`METRICS_PORT`), one with tracing
 * on at 100 % sampling exporting OTLP/HTTP protobuf to a local receiver (its own process). The
 * same load goes to each in interleaved rounds (the order rotates every round, so a change in
 * the host's load falls on all three alike): `POST /api/v1/chat` at concurrency BENCH_CHAT_C and
 * agent turns (`POST /managed-agents/sessions/{id}/messages`, read to the end of the stream) at
 * BENCH_TURN_C. The figure is the server's CPU time per request (`process.cpuUsage()` of the
 * server process over its segments, all threads), and its ratio to "off" per round.
 *
 * BENCH_BEFORE_DIST: the dist directory of a build of the commit before telemetry landed, run
 * with the environment of "off" as a fourth server ("before"), so one run compares off with it.
 * BENCH_CONFIGS: a comma-separated list of configuration name prefixes to run besides "off"
 * (`tracing`). BENCH_CPU_PROF: a directory where each server writes V8 CPU profiles on exit (a directory
 * per configuration, a profile per thread).
 */
import { type ChildProcess, fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
const CHAT_N = Number(process.env.BENCH_CHAT_REQUESTS ?? 400);
const CHAT_C = Number(process.env.BENCH_CHAT_C ?? 8);
const TURN_N = Number(process.env.BENCH_TURNS ?? 80);
const TURN_C = Number(process.env.BENCH_TURN_C ?? 4);

const BEFORE_DIST = process.env.BENCH_BEFORE_DIST;
const ONLY = process.env.BENCH_CONFIGS?.split(',').map((s) => s.trim());
const CPU_PROF = process.env.BENCH_CPU_PROF;

function start(
  script: string,
  env: Record<string, string>,
  profileName?: string,
): Promise<{ child: ChildProcess; url: string }> {
  const prof =
    CPU_PROF && profileName ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(CPU_PROF, profileName)}`] : [];
  const child = fork(path.join(here, script), [], {
    env: { ...process.env, ...env },
    execArgv: ['--import', 'tsx', ...prof],
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

function ask<T>(child: ChildProcess, type: string): Promise<T> {
  return new Promise((resolve) => {
    const on = (m: { type: string }) => {
      if (m.type !== type) return;
      child.off('message', on);
      resolve(m as T);
    };
    child.on('message', on);
    child.send({ type });
  });
}
const cpuOf = async (child: ChildProcess) => (await ask<{ cpuMicros: number }>(child, 'stats')).cpuMicros;

interface Server {
  name: string;
  child: ChildProcess;
  url: string;
  key: string;
  sessions: string[];
}

async function api(s: Server, p: string, body: unknown): Promise<Response> {
  return fetch(`${s.url}/api/v1${p}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${s.key}` },
    body: JSON.stringify(body),
  });
}

/** Runs `n` requests at concurrency `c`, `one(worker)`; resolves with each one's duration (ms). */
async function load(n: number, c: number, one: (worker: number) => Promise<void>): Promise<number[]> {
  const times: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: c }, async (_, w) => {
      while (next < n) {
        next++;
        const t0 = performance.now();
        await one(w);
        times.push(performance.now() - t0);
      }
    }),
  );
  return times;
}

const chatOnce = (s: Server) => async () => {
  const res = await api(s, '/chat', { messages: [{ role: 'user', content: 'Write twenty tokens.' }] });
  if (res.status !== 200) throw new Error(`${s.name}: /chat ${res.status} ${await res.text()}`);
  await res.text();
};

/**
 * One agent turn on the worker's own session (a session runs one turn at a time; the run may
 * still be closing for a moment after its stream ended: a 409 then is retried).
 */
const turnOnce = (s: Server) => async (worker: number) => {
  const sessionId = s.sessions[worker] as string;
  for (;;) {
    const res = await api(s, `/managed-agents/sessions/${sessionId}/messages`, { message: 'Hello there' });
    if (res.status === 409) {
      await res.text();
      await new Promise((r) => setTimeout(r, 10));
      continue;
    }
    if (res.status !== 200) throw new Error(`${s.name}: turn ${res.status} ${await res.text()}`);
    const text = await res.text();
    if (!text.includes('run.completed')) throw new Error(`${s.name}: turn did not complete`);
    return;
  }
};

/** A session per concurrent turn, as a caller would hold them. */
async function prepare(s: Server): Promise<void> {
  const a = await api(s, '/managed-agents/agents', { name: 'bench', prompt: 'You are terse.' });
  if (a.status !== 201) throw new Error(`agent: ${a.status} ${await a.text()}`);
  const agentId = ((await a.json()) as { agent: { id: string } }).agent.id;
  for (let i = 0; i < TURN_C; i++) {
    const r = await api(s, `/managed-agents/agents/${agentId}/sessions`, {});
    if (r.status !== 201) throw new Error(`session: ${r.status} ${await r.text()}`);
    s.sessions.push(((await r.json()) as { session: { id: string } }).session.id);
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? Number.NaN;
};

async function main() {
  const load0 = os.loadavg();
  const upstream = await start('upstream.ts', {});
  const receiver = await start('receiver.ts', {});
  const apiKey = `svc_ai_${'bench'.repeat(13)}0000`.slice(0, 71);
  const common = {
    LOG_LEVEL: 'silent',
    OPENAI_BASE_URL: upstream.url,
    OPENAI_API_KEY: 'bench',
    CHAT_MODEL: 'fake-chat',
    CHAT_MODEL_INPUT_PRICE_PER_MTOK: '1',
    CHAT_MODEL_OUTPUT_PRICE_PER_MTOK: '2',
    INIT_WORKSPACE_NAME: 'bench',
    INIT_API_KEY: apiKey,
    INIT_CREDITS_USD: '100000',
    RATE_LIMIT_CHAT: '100000000',
    RATE_LIMIT_AGENT_MESSAGE: '100000000',
    RATE_LIMIT_SESSION_CREATE: '100000000',
    LLM_MAX_RETRIES: '0',
  };
  const configs: [string, Record<string, string>][] = [
    ['off', {}],
    ['metrics on', { METRICS_PORT: '0' }],
    [
      'tracing on (100 %)',
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
        OTEL_TRACES_SAMPLER: 'always_on',
      },
    ],
  ];
  // The build of the commit before telemetry landed, with the same environment as off.
  if (BEFORE_DIST) configs.push(['before', { BENCH_SERVER_DIST: path.resolve(BEFORE_DIST) }]);
  if (ONLY)
    configs.splice(
      0,
      configs.length,
      ...configs.filter(([name]) => name === 'off' || ONLY.some((o) => name.startsWith(o))),
    );
  const servers: Server[] = [];
  const dirs: string[] = [];
  try {
    for (const [name, env] of configs) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-observe-'));
      dirs.push(dir);
      const { child, url } = await start(
        'server.ts',
        { ...common, ...env, DATA_DIR: dir },
        name.replace(/[^a-z]+/g, '-').replace(/-$/, ''),
      );
      const s: Server = { name, child, url, key: apiKey, sessions: [] };
      await prepare(s);
      servers.push(s);
    }
    const totals = new Map<string, { cpu: number; n: number; times: number[]; ratios: number[] }>();
    const tally = (key: string) => {
      let t = totals.get(key);
      if (!t) {
        t = { cpu: 0, n: 0, times: [], ratios: [] };
        totals.set(key, t);
      }
      return t;
    };
    for (let round = 0; round <= ROUNDS; round++) {
      const warm = round === 0;
      const order = servers.map((_, i) => servers[(i + round) % servers.length] as Server);
      const perRequest = new Map<string, number>();
      for (const s of order) {
        for (const [workload, n, c, one] of [
          ['/chat', CHAT_N, CHAT_C, chatOnce(s)],
          ['agent turn', TURN_N, TURN_C, turnOnce(s)],
        ] as const) {
          const c0 = await cpuOf(s.child);
          const times = await load(n, c, one);
          const cpu = (await cpuOf(s.child)) - c0;
          if (warm) continue;
          const t = tally(`${s.name}|${workload}`);
          t.cpu += cpu;
          t.n += n;
          t.times.push(...times);
          perRequest.set(`${s.name}|${workload}`, cpu / n);
        }
      }
      if (warm) continue;
      for (const [key, v] of perRequest) {
        const off = perRequest.get(`off|${key.split('|')[1]}`) as number;
        tally(key).ratios.push(v / off - 1);
      }
      process.stderr.write(`round ${round}/${ROUNDS} done\n`);
    }
    const spans = (await ask<{ spans: number }>(receiver.child, 'count')).spans;
    const load1 = os.loadavg();
    const pct = (x: number) => `${x >= 0 ? '+' : ''}${(x * 100).toFixed(1)} %`;
    console.log(
      `\n${os.cpus().length} CPUs, load average at start ${load0.map((l) => l.toFixed(2)).join(' ')}, at end ${load1.map((l) => l.toFixed(2)).join(' ')}; database: ${process.env.DATABASE_URL ? 'PostgreSQL' : 'embedded PGlite'}`,
    );
    console.log(
      `${ROUNDS} rounds × (${CHAT_N} /chat at c=${CHAT_C} + ${TURN_N} agent turns at c=${TURN_C}) per configuration; ${spans} spans received\n`,
    );
    console.log(
      '| workload | configuration | server CPU ms/request | vs off | median of rounds vs off | range of rounds vs off | total p50 ms |',
    );
    console.log('| --- | --- | --- | --- | --- | --- | --- |');
    for (const workload of ['/chat', 'agent turn']) {
      const off = totals.get(`off|${workload}`) as { cpu: number; n: number };
      for (const [name] of configs) {
        const t = totals.get(`${name}|${workload}`) as {
          cpu: number;
          n: number;
          times: number[];
          ratios: number[];
        };
        const per = t.cpu / t.n / 1000;
        const vs = name === 'off' ? '' : pct(t.cpu / t.n / (off.cpu / off.n) - 1);
        const mid = name === 'off' ? '' : pct(median(t.ratios));
        const range = name === 'off' ? '' : `${pct(Math.min(...t.ratios))} … ${pct(Math.max(...t.ratios))}`;
        console.log(
          `| ${workload} | ${name} | ${per.toFixed(3)} | ${vs} | ${mid} | ${range} | ${median(t.times).toFixed(1)} |`,
        );
      }
    }
  } finally {
    const children = [...servers.map((s) => s.child), upstream.child, receiver.child];
    const exited = children.map((c) => new Promise((r) => c.once('exit', r)));
    for (const c of children) c.disconnect();
    await Promise.race([Promise.all(exited), new Promise((r) => setTimeout(r, 15_000))]);
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
