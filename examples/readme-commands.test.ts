import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type AiSuiteServer, createServer } from '@ai-suite/server';
import { createTestDatabase, type TestDatabase } from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * Every example's README, run as written: the fake model started by the README's own command
 * (`pnpm fake-model`), the fake image providers likewise (`pnpm fake-images`), a server with the variables the README gives `pnpm start`, the README's
 * CLI lines for a workspace and key, then each example's command through `sh`, exactly as a
 * newcomer would paste it. Examples consume the SDK as built (its `dist/`, made current by the
 * project's global setup `packages/sdk/test/ensure-built.ts`), like a user.
 */
const EXAMPLES_DIR = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(EXAMPLES_DIR, '..');
const SLOW = 600_000;
const sh = promisify(execFile);

const examples = fs
  .readdirSync(EXAMPLES_DIR, { withFileTypes: true })
  .filter((d) => d.isDirectory() && fs.existsSync(path.join(EXAMPLES_DIR, d.name, 'package.json')))
  .map((d) => d.name)
  .sort();

interface Readme {
  /** The setup block: fake model, server, CLI lines. */
  setup: string[];
  /** The example's own command. */
  run: string;
}

/** The `sh` blocks of a README, comments removed: the first is the setup, the second the example. */
function parseReadme(name: string): Readme {
  const text = fs.readFileSync(path.join(EXAMPLES_DIR, name, 'README.md'), 'utf8');
  const blocks = [...text.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) =>
    (m[1] as string)
      .split('\n')
      .map((l) => l.replace(/\s+#\s.*$/, '').trim())
      .filter(Boolean),
  );
  expect(blocks.length, `${name}/README.md: a setup block and a run block`).toBeGreaterThanOrEqual(2);
  const run = blocks[1] as string[];
  expect(run, `${name}/README.md: one command to run the example`).toHaveLength(1);
  return { setup: blocks[0] as string[], run: run[0] as string };
}

/** `A=1 B=2 pnpm start` → `{A: '1', B: '2'}`. */
function envOf(line: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const m of line.matchAll(/(?:^|\s)([A-Z][A-Z0-9_]*)=(\S+)/g)) env[m[1] as string] = m[2] as string;
  return env;
}

/**
 * Starts a README's fake-upstream line (its ports made free ones through `env`) and waits until
 * it prints every URL `patterns` look for.
 */
async function startFake(
  line: string,
  env: Record<string, string>,
  patterns: RegExp[],
): Promise<{ child: ChildProcess; urls: string[] }> {
  const child = spawn('sh', ['-c', line], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  fakes.push(child);
  let out = '';
  child.stdout?.on('data', (d) => {
    out += d.toString();
  });
  for (let waited = 0; !patterns.every((p) => p.test(out)); waited += 100) {
    if (waited > 60_000 || child.exitCode !== null) throw new Error(`${line} did not start: ${out}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { child, urls: patterns.map((p) => p.exec(out)?.[1] ?? '') };
}

const readmes = new Map<string, Readme>();
const fakes: ChildProcess[] = [];
let fakeUrl: string;
let db: TestDatabase | undefined;
let dataDir: string | undefined;
let server: AiSuiteServer;
let baseUrl: string;
let apiKey: string;
const outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-example-out-'));

beforeAll(async () => {
  for (const name of examples) readmes.set(name, parseReadme(name));

  const setup = readmes.get(examples[0] as string)?.setup as string[];
  const fakeLine = setup.find((l) => l.startsWith('pnpm fake-model')) as string;
  [fakeUrl = ''] = (await startFake(fakeLine, { FAKE_MODEL_PORT: '0' }, [/listening on (\S+)/])).urls;
  // The image fakes, as examples/image-enhance starts them.
  const imagesLine = readmes
    .get('image-enhance')
    ?.setup.find((l) => l.startsWith('pnpm fake-images')) as string;
  const [replicateUrl = '', openaiImagesUrl = ''] = (
    await startFake(imagesLine, { FAKE_REPLICATE_PORT: '0', FAKE_OPENAI_IMAGES_PORT: '0' }, [
      /Replicate predictions API listening on (\S+)/,
      /OpenAI images API listening on (\S+)/,
    ])
  ).urls;

  // One server for every example, with the union of the variables the READMEs give it.
  const serverEnv: Record<string, string> = {};
  for (const r of readmes.values())
    Object.assign(serverEnv, envOf(r.setup.find((l) => l.endsWith('pnpm start')) ?? ''));
  expect(serverEnv.OPENAI_BASE_URL).toBe('http://127.0.0.1:4010/v1'); // what `pnpm fake-model` listens on
  serverEnv.OPENAI_BASE_URL = fakeUrl; // here on a free port instead, so runs never collide
  expect(serverEnv.REPLICATE_BASE_URL).toBe('http://127.0.0.1:4011/v1'); // what `pnpm fake-images` listens on
  expect(serverEnv.IMAGE_ALT_BASE_URL).toBe('http://127.0.0.1:4012/v1');
  serverEnv.REPLICATE_BASE_URL = replicateUrl;
  serverEnv.IMAGE_ALT_BASE_URL = openaiImagesUrl;
  if (process.env.DATABASE_URL) {
    db = await createTestDatabase();
    serverEnv.DATABASE_URL = db.databaseUrl as string;
  } else {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-examples-'));
    serverEnv.DATA_DIR = dataDir;
  }
  server = await createServer({ env: { LOG_LEVEL: 'silent', ...serverEnv } });
  baseUrl = (await server.listen(0, '127.0.0.1')).url;

  // The README's CLI lines, as written, on the server's database.
  const cliLines = setup.filter((l) => /\bpnpm (-s )?cli\b/.test(l));
  const { stdout } = await sh('sh', ['-c', `set -e\n${cliLines.join('\n')}\necho "KEY=$AI_SUITE_API_KEY"`], {
    cwd: ROOT,
    env: {
      ...process.env,
      ...(dataDir ? { DATA_DIR: dataDir } : { DATABASE_URL: serverEnv.DATABASE_URL }),
    },
  });
  apiKey = /KEY=(svc_ai_\w+)/.exec(stdout)?.[1] as string;
  expect(apiKey).toMatch(/^svc_ai_[A-Za-z0-9]{64}$/);
}, SLOW);

afterAll(async () => {
  await server?.close();
  await db?.drop();
  for (const fake of fakes) {
    if (fake.pid && fake.exitCode === null) {
      const exited = once(fake, 'exit');
      process.kill(-fake.pid, 'SIGTERM');
      await exited;
    }
  }
  for (const d of [dataDir, outDir]) if (d) fs.rmSync(d, { recursive: true, force: true });
});

const exampleEnv = () => ({
  ...process.env,
  AI_SUITE_API_KEY: apiKey,
  AI_SUITE_BASE_URL: baseUrl,
  OUT_DIR: outDir,
  PORT: '0',
});

describe('every example has a README with the common setup', () => {
  it('documents the same setup everywhere, and what to change for a real provider', () => {
    expect(examples).toEqual([
      'agent-custom-tools',
      'autonomous-report',
      'chat-widget',
      'conversation-report',
      'document-qa',
      'image-enhance',
      'openai-agent',
    ]);
    for (const name of examples) {
      const r = readmes.get(name) as Readme;
      const text = fs.readFileSync(path.join(EXAMPLES_DIR, name, 'README.md'), 'utf8');
      expect(r.setup[0], name).toBe('pnpm fake-model');
      expect(r.run, name).toMatch(new RegExp(`^pnpm --filter @ai-suite/example-${name} start\\b`));
      expect(text, name).toMatch(/With a real provider/);
    }
  });
});

describe('the documented example commands, run as written', () => {
  it(
    'agent-custom-tools: an integrator tool and a signed callback on loopback',
    async () => {
      const { stdout } = await sh('sh', ['-c', readmes.get('agent-custom-tools')?.run as string], {
        cwd: ROOT,
        env: exampleEnv(),
      });
      expect(stdout).toContain('→ lookup_order(');
      expect(stdout).toContain('← get_shipping_quote: {"carrier":"PostNord"');
      expect(stdout).toContain('Done. The tools answered:');
    },
    SLOW,
  );

  it(
    'autonomous-report: a run with a stray `--` before the task, its deliverable downloaded',
    async () => {
      const run = readmes.get('autonomous-report')?.run as string;
      expect(run).toContain(' start -- "');
      const { stdout } = await sh('sh', ['-c', run], { cwd: ROOT, env: exampleEnv() });
      expect(stdout).toMatch(/: completed\n/);
      expect(stdout).toMatch(/saved report\.md \(\d+ bytes, text\/markdown\)/);
      expect(fs.readFileSync(path.join(outDir, 'report.md'), 'utf8')).toContain('the fake model wrote');
      // The task reached the model without the `--`.
      const tasks = await server.deps
        .em()
        .execute<{ task: string }[]>('select task from autonomous_runs order by created_at desc limit 1');
      expect(tasks[0]?.task).toBe('Write the weekly report as report.md');
    },
    SLOW,
  );

  it(
    'conversation-report: a period after a stray `--`, a report as Markdown',
    async () => {
      const { stdout, stderr } = await sh('sh', ['-c', readmes.get('conversation-report')?.run as string], {
        cwd: ROOT,
        env: exampleEnv(),
      });
      expect(stderr).toMatch(/^\d+ conversations$/m);
      expect(stdout).toMatch(/^# Conversation report$/m); // after pnpm's own "> … start" banner
      expect(stdout).toContain('## Confidence');
    },
    SLOW,
  );

  it(
    'document-qa: signs in as the person the README adds, uploads the sample, answers with cited pages',
    async () => {
      // The README's own lines beyond the common setup: the person to sign in as.
      const common = readmes.get(examples[0] as string)?.setup ?? [];
      const own = (readmes.get('document-qa')?.setup ?? []).filter(
        (l) => !common.includes(l) && !l.startsWith('pnpm fake-') && !l.endsWith('pnpm start'),
      );
      expect(own.some((l) => /\bpnpm cli user add Demo\b/.test(l))).toBe(true);
      const run = readmes.get('document-qa')?.run as string;
      const dbEnv = dataDir ? { DATA_DIR: dataDir } : { DATABASE_URL: db?.databaseUrl as string };
      const { stdout } = await sh('sh', ['-c', `set -e\n${own.join('\n')}\n${run}`], {
        cwd: ROOT,
        env: { ...exampleEnv(), ...dbEnv },
      });
      expect(stdout).toContain('signed in as ada@example.com, workspace Demo');
      expect(stdout).toContain('uploaded trailhead-manual.pdf: 3 chunks');
      expect(stdout).toMatch(/^uploaded faq\.md: \d+ chunks?$/m);
      expect(stdout).toMatch(/^ {2}trailhead-manual\.pdf {2}ready {2}3 chunks$/m);
      // Grounded answers citing the right document and page; the unanswerable question is said so.
      const cited = (question: string) => {
        const block = stdout.split('\nQ: ').find((b) => b.startsWith(`${question}\n`)) ?? '';
        const answer = /^A: (.*)$/m.exec(block)?.[1] ?? '';
        const n = /\[(\d+)\]\.$/.exec(answer)?.[1];
        const source = new RegExp(`^ {3}\\[${n}\\] (.*) \\(relevance`, 'm').exec(block)?.[1];
        return { answer, source };
      };
      const pegs = cited('How many pegs come with the Trailhead 2 tent?');
      expect(pegs.answer).toContain('comes with 12 aluminium pegs');
      expect(pegs.source).toBe('trailhead-manual.pdf, page 1');
      const wet = cited('How long should I wait before storing a wet tent?');
      expect(wet.answer).toContain('dry it within 24 hours');
      expect(wet.source).toBe('trailhead-manual.pdf, page 3');
      const warranty = cited('How long is the warranty on tents?');
      expect(warranty.answer).toMatch(/^Every jacket and tent carries a three-year warranty/);
      expect(warranty.source).toBe('faq.md, page 1');
      expect(stdout).toContain(
        'Q: What is the capital of Peru?\nA: The documents do not contain an answer to this question.\n   confidence 0.00',
      );

      // Own files and questions: a document of the same name is replaced, not duplicated.
      const { stdout: again } = await sh(
        'sh',
        [
          '-c',
          `${own.filter((l) => l.startsWith('export')).join('\n')}\n${run} -- examples/document-qa/docs/faq.md --ask "What does express delivery cost?"`,
        ],
        { cwd: ROOT, env: exampleEnv() },
      );
      expect(again).toContain('replaced faq.md');
      expect(again).toContain('2 documents in the index:');
      expect(again).toMatch(/A: Express delivery within 24 hours costs 12 euros \[\d\]\./);
    },
    SLOW,
  );

  it(
    'openai-agent: the official openai client drives an agent through an integrator tool',
    async () => {
      const { stdout } = await sh('sh', ['-c', readmes.get('openai-agent')?.run as string], {
        cwd: ROOT,
        env: exampleEnv(),
      });
      expect(stdout).toContain('→ lookup_order(');
      expect(stdout).toMatch(/← \{"orderId":"[^"]*","status":"shipped"/);
      expect(stdout).toContain('Done. The tools answered:');
    },
    SLOW,
  );

  it(
    'image-enhance: a generated scan enhanced with the ultrasound profile, then a file on the alternative provider',
    async () => {
      const run = readmes.get('image-enhance')?.run as string;
      const { stdout } = await sh('sh', ['-c', run], { cwd: ROOT, env: exampleEnv() });
      expect(stdout).toMatch(
        /^generated scan\.png \(\d+ bytes, 64×64\) with fake\/scan-enhancer on replicate, \$0\.0100$/m,
      );
      expect(stdout).toMatch(
        /^enhanced with profile ultrasound: fake\/scan-enhancer on replicate, 0 tokens, \$0\.0100$/m,
      );
      const enhanced = fs.readFileSync(path.join(outDir, 'scan-enhanced.png'));
      expect(stdout).toContain(`saved scan-enhanced.png (${enhanced.length} bytes, 64×64 PNG)`);
      expect(enhanced.subarray(1, 4).toString()).toBe('PNG');

      // The options the README lists: the generated scan again, after a `--`, on the other provider.
      const { stdout: alt } = await sh(
        'sh',
        ['-c', `${run} -- "${path.join(outDir, 'scan.png')}" --provider openai --store`],
        { cwd: ROOT, env: exampleEnv() },
      );
      expect(alt).not.toContain('generated');
      expect(alt).toMatch(
        /^enhanced with profile ultrasound: gpt-image-1 on openai, \d+ tokens, \$0\.0\d+$/m,
      );
      expect(alt).toMatch(/^stored: raw image \S+, processed \S+$/m);
      expect(alt).toMatch(/^saved scan-enhanced\.png \(\d+ bytes, 64×64 PNG\)$/m);

      // Three images, each metered on the server.
      const rows = await server.deps
        .em()
        .execute<{ model: string; cost_micros: string }[]>(
          `select model, cost_micros from usage_records where endpoint = '/image' order by created_at`,
        );
      expect(rows.map((r) => r.model)).toEqual(['fake/scan-enhancer', 'fake/scan-enhancer', 'gpt-image-1']);
      expect(rows.every((r) => Number(r.cost_micros) > 0)).toBe(true);
    },
    SLOW,
  );

  it(
    'chat-widget: serves the page and mints a widget token for the app it created',
    async () => {
      const child = spawn('sh', ['-c', readmes.get('chat-widget')?.run as string], {
        cwd: ROOT,
        env: exampleEnv(),
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
      });
      let out = '';
      child.stdout?.on('data', (d) => {
        out += d.toString();
      });
      child.stderr?.on('data', (d) => {
        out += d.toString();
      });
      try {
        for (let waited = 0; !/ on (http:\S+)/.test(out); waited += 100) {
          if (waited > 120_000 || child.exitCode !== null)
            throw new Error(`chat widget did not start: ${out}`);
          await new Promise((r) => setTimeout(r, 100));
        }
        const url = / on (http:\S+)/.exec(out)?.[1] as string;
        expect(await (await fetch(url)).text()).toContain('<script');
        const config = (await (await fetch(`${url}/widget-config`)).json()) as {
          token: string;
          appId: string;
        };
        expect(config.token).toMatch(/^svc_wt_/);
        expect(out).toContain(`chat widget for app ${config.appId} on ${url}`);
      } finally {
        if (child.pid && child.exitCode === null) {
          const exited = once(child, 'exit');
          process.kill(-child.pid, 'SIGTERM');
          await exited;
        }
      }
    },
    SLOW,
  );
});

describe('the root README', () => {
  it('quickstart: its curl of /api/v1/chat gets a streamed reply', async () => {
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const block = /## A reply in the first minute[\s\S]*?```sh\n[\s\S]*?```[\s\S]*?```sh\n([\s\S]*?)```/.exec(
      readme,
    )?.[1];
    const curl = (block ?? '').slice((block ?? '').indexOf('curl')).replace(/\\\n\s*/g, '');
    expect(curl).toMatch(/^curl -N http:\/\/localhost:8080\/api\/v1\/chat /);
    const { stdout } = await sh('sh', ['-c', curl.replace('http://localhost:8080', baseUrl)], {
      env: { ...process.env, KEY: apiKey },
    });
    expect(stdout).toBe('Hello from the fake model. You said: "Say hello"');
  });

  it('every relative link of the README, the guides and the examples points into the repository', () => {
    const files = [
      'README.md',
      'packages/sdk/README.md',
      ...fs
        .readdirSync(path.join(ROOT, 'docs'))
        .filter((f) => f.endsWith('.md'))
        .map((f) => `docs/${f}`),
      ...examples.map((e) => `examples/${e}/README.md`),
    ];
    const broken: string[] = [];
    for (const file of files) {
      const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
      for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = (m[1] as string).split('#')[0] as string;
        if (!target || /^[a-z]+:/.test(target)) continue;
        const resolved = path.resolve(path.dirname(path.join(ROOT, file)), target);
        if (!resolved.startsWith(`${ROOT}${path.sep}`) || !fs.existsSync(resolved))
          broken.push(`${file}: ${m[1]}`);
      }
    }
    expect(broken).toEqual([]);
  });
});
