import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const SDK_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROOT = path.resolve(SDK_DIR, '../..');
const TSC = path.join(ROOT, 'node_modules/typescript/bin/tsc');
const SLOW = 600_000;

/**
 * The SDK as a user gets it: packed (`pnpm --filter @ai-suite/sdk pack`),
 * installed with npm into a project outside the workspace, type-checked under `strict` with
 * the library's own declarations checked too (no skipLibCheck), and run, as ESM and as
 * CommonJS, against the in-process server.
 */
let ts: TestServer & { fake: FakeOpenAI };
let apiKey: string;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-sdk-consumer-'));

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  apiKey = (await createTestWorkspace(ts, { creditsUsd: '5' })).apiKey;
});
afterAll(async () => {
  await ts?.close();
  fs.rmSync(work, { recursive: true, force: true });
});

const CONSUMER_TYPES = `declare const process: { env: Record<string, string | undefined> };
`;

const ESM = `${CONSUMER_TYPES}import { AiSuite, NotFoundError, toFile, verifyWebhook, type AgentListItem, type AgentEvent, type AppChatParams } from '@ai-suite/sdk';

const client = new AiSuite({ baseURL: process.env.AI_SUITE_BASE_URL, apiKey: process.env.AI_SUITE_API_KEY });
const { agent } = await client.agents.create({ name: 'Packed ESM' });
const listed: AgentListItem[] = [];
for await (const a of client.agents.list()) listed.push(a);
const { session } = await client.sessions.create(agent.id);
const types: AgentEvent['type'][] = [];
const text: string = await client.sessions.send(session.id, 'hello').on('*', (e) => types.push(e.type)).finalText();
let notFound = '';
try {
  await client.agents.retrieve('00000000-0000-0000-0000-000000000000');
} catch (err) {
  if (err instanceof NotFoundError) notFound = err.message;
}
// Uploads: a path on disk, and bytes with a name, into a folder.
const fromDisk = await client.storage.upload(toFile(process.env.FILE_PATH as string), { folder: '/packed' });
const fromBytes = await client.storage.upload(new TextEncoder().encode('bytes'), { name: 'b.txt', folder: '/packed' });
const read = await (await client.storage.read(fromDisk.fileId, 'file')).text();
const tree = await client.storage.tree('/packed');
// One rule: the API's body; withResponse() adds the raw response.
const { data: created, response } = await client.apps.create({ name: 'Packed app' }).withResponse();
const chat: AppChatParams = { message: 'hi', role: 'student' };
const hook = JSON.parse(process.env.WEBHOOK as string) as { body: string; headers: Record<string, string>; secret: string };
const event = await verifyWebhook<{ type: string }>(hook.body, hook.headers, hook.secret);
console.log(JSON.stringify({
  names: listed.map((a) => a.name), text, first: types[0], notFound,
  uploaded: [typeof fromDisk.fileId, fromBytes.imported], read, files: tree.files.map((f) => f.filename).sort(),
  app: [created.app.name, response.status], role: chat.role, webhook: event.type,
}));
`;

const CJS = `${CONSUMER_TYPES}import sdk = require('@ai-suite/sdk');

async function main(): Promise<void> {
  const client = new sdk.AiSuite({ baseURL: process.env.AI_SUITE_BASE_URL, apiKey: process.env.AI_SUITE_API_KEY });
  const models: string[] = [];
  for await (const m of client.models.list()) models.push(m.id);
  const me = await client.me();
  const err = await client.agents.retrieve('nope').catch((e: unknown) => e);
  console.log(JSON.stringify({ models, workspace: typeof me.workspace.id, isNotFound: err instanceof sdk.NotFoundError }));
}
void main();
`;

describe('the packed SDK in a project outside the workspace', () => {
  it(
    'packs, installs with npm, type-checks under strict, and runs as ESM and CommonJS',
    async () => {
      // `pnpm … pack` builds through the `prepare` script; here `dist/` is already current
      // (ensure-built.ts), and rebuilding it while the examples' tests import it would break them.
      const manifest = JSON.parse(fs.readFileSync(path.join(SDK_DIR, 'package.json'), 'utf8'));
      expect(manifest.scripts.prepare).toBe('tsup');
      await run('pnpm', ['--filter', '@ai-suite/sdk', 'pack', '--pack-destination', work], {
        cwd: ROOT,
        env: { ...process.env, npm_config_ignore_scripts: 'true' },
      });
      const tarball = fs.readdirSync(work).find((f) => f.endsWith('.tgz'));
      expect(tarball).toMatch(/^ai-suite-sdk-\d+\.\d+\.\d+\.tgz$/);

      const app = path.join(work, 'app');
      fs.mkdirSync(app);
      fs.writeFileSync(
        path.join(app, 'package.json'),
        JSON.stringify({ name: 'consumer', private: true, version: '1.0.0' }, null, 2),
      );
      await run('npm', ['install', path.join(work, tarball as string), '--no-audit', '--no-fund'], {
        cwd: app,
      });
      const installed = JSON.parse(
        fs.readFileSync(path.join(app, 'node_modules/@ai-suite/sdk/package.json'), 'utf8'),
      ) as { files: string[] };
      expect(installed.files).toContain('dist');
      expect(fs.existsSync(path.join(app, 'node_modules/@ai-suite/sdk/src'))).toBe(false);

      fs.writeFileSync(path.join(app, 'esm.mts'), ESM);
      fs.writeFileSync(path.join(app, 'cjs.cts'), CJS);
      fs.writeFileSync(
        path.join(app, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            strict: true,
            target: 'ES2022',
            module: 'NodeNext',
            moduleResolution: 'NodeNext',
            lib: ['ES2022', 'DOM', 'DOM.Iterable'],
            types: [],
            skipLibCheck: false,
            outDir: 'out',
          },
          files: ['esm.mts', 'cjs.cts'],
        }),
      );
      const tsc = await run(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: app }).catch(
        (e: { stdout: string }) => ({ stdout: e.stdout, failed: true }),
      );
      expect(tsc.stdout).toBe('');

      // The licence travels with the package.
      expect(fs.readFileSync(path.join(app, 'node_modules/@ai-suite/sdk/LICENSE'), 'utf8')).toMatch(
        /^MIT License/,
      );
      fs.writeFileSync(path.join(app, 'hello.txt'), 'hello from disk');
      const secret = `whsec_${Buffer.alloc(32, 9).toString('base64')}`;
      const body = JSON.stringify({ type: 'run.completed', id: 'r1' });
      const now = new Date();
      const webhook = {
        body,
        secret,
        headers: {
          'webhook-id': 'r1',
          'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
          'webhook-signature': new Webhook(secret).sign('r1', now, body),
        },
      };
      const env = {
        ...process.env,
        AI_SUITE_BASE_URL: ts.url,
        AI_SUITE_API_KEY: apiKey,
        FILE_PATH: path.join(app, 'hello.txt'),
        WEBHOOK: JSON.stringify(webhook),
      };
      const esm = await run(process.execPath, ['out/esm.mjs'], { cwd: app, env });
      expect(JSON.parse(esm.stdout)).toEqual({
        names: ['Packed ESM'],
        text: 'Hello from the fake model.',
        first: 'run.started',
        notFound: 'Agent not found',
        uploaded: ['string', 1],
        read: 'hello from disk',
        files: ['b.txt', 'hello.txt'],
        app: ['Packed app', 201],
        role: 'student',
        webhook: 'run.completed',
      });
      const cjs = await run(process.execPath, ['out/cjs.cjs'], { cwd: app, env });
      expect(JSON.parse(cjs.stdout)).toEqual({
        models: ['fake-chat', 'fake-embed'],
        workspace: 'string',
        isNotFound: true,
      });
    },
    SLOW,
  );
});
