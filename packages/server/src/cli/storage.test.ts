import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AiSuiteServer, createServer } from '../server.js';
import { LocalObjectStore } from '../storage/local-store.js';
import { migrateObjects } from '../storage/migrate.js';
import type { ObjectStore, PutOptions } from '../storage/object-store.js';
import { S3ObjectStore } from '../storage/s3-store.js';
import { createTestDatabase, type TestDatabase } from '../test/harness.js';
import { type CliResult, runCliInProcess, runCliProcess } from '../test/spawn.js';

/**
 * `ai-suite storage migrate` as an operator runs it: a service that stored files on local disk
 * moves them to S3 (s3rver on loopback), restarts on S3 and serves every file byte for byte,
 * then moves back. The CLI runs in this process beside the running server; the refusals run
 * as child processes (the real entry point and its exit codes).
 */
const SLOW = 300_000;
let s3: S3rver;
let s3Dir: string;
let dataDir: string;
let db: TestDatabase | undefined;
let server: AiSuiteServer | undefined;
let url: string;
let s3Env: Record<string, string>;

/** The files uploaded, by id: their bytes. */
const uploaded = new Map<string, Buffer>();
let workspaceId: string;
let apiKey: string;

const baseEnv = () => ({
  DATA_DIR: dataDir,
  LOG_LEVEL: 'silent',
  ...(db?.databaseUrl ? { DATABASE_URL: db.databaseUrl } : {}),
});

async function startServer(extra: Record<string, string> = {}) {
  // On the embedded database this process owns the data directory and the CLI attaches to it.
  server = await createServer({ env: { ...baseEnv(), ...extra } });
  url = (await server.listen(0, '127.0.0.1')).url;
}

const cli = (...args: string[]) =>
  runCliInProcess(['storage', 'migrate', ...args], { ...baseEnv(), ...s3Env });
const report = (r: CliResult) => {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as {
    from: string;
    to: string;
    dryRun: boolean;
    objects: number;
    bytes: number;
    copied: number;
    copiedBytes: number;
    present: number;
    missing: string[];
    failed: { key: string; error: string }[];
  };
};

async function content(fileId: string): Promise<Response> {
  return fetch(`${url}/api/v1/workspaces/${workspaceId}/storage/content?fileId=${fileId}&fileType=file`, {
    headers: { authorization: `Bearer ${apiKey}` },
  });
}

async function expectEveryFileServed() {
  for (const [id, bytes] of uploaded) {
    const res = await content(id);
    expect(res.status, id).toBe(200);
    expect(Buffer.from(await res.arrayBuffer()).equals(bytes), id).toBe(true);
  }
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
async function readAll(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

beforeAll(async () => {
  s3Dir = fs.mkdtempSync(path.join(os.tmpdir(), 's3rver-migrate-'));
  s3 = new S3rver({
    address: '127.0.0.1',
    port: 0,
    silent: true,
    directory: s3Dir,
    configureBuckets: [{ name: 'moved' }],
  });
  const addr = await s3.run();
  s3Env = {
    S3_BUCKET: 'moved',
    S3_ENDPOINT: `http://127.0.0.1:${addr.port}`,
    S3_REGION: 'us-east-1',
    S3_ACCESS_KEY_ID: 'S3RVER',
    S3_SECRET_ACCESS_KEY: 'S3RVER',
    S3_FORCE_PATH_STYLE: 'true',
    S3_KEY_PREFIX: 'prod/',
  };
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-migrate-'));
  if (process.env.DATABASE_URL) db = await createTestDatabase();
  await startServer();
  const { WorkspacesService } = await import('../domains/workspaces/service.js');
  const svc = new WorkspacesService(server?.deps.em() as never);
  const ws = await svc.createWorkspace({
    name: `migrate-${randomBytes(3).toString('hex')}`,
    monthlyTokenQuota: null,
  });
  workspaceId = ws.id;
  apiKey = (await svc.createApiKey({ workspaceId, name: 'migrate' })).key;
  // A text file, binary files of odd sizes (one over the 8 MB multipart threshold), an empty one.
  const files: [string, Buffer][] = [
    ['notes.txt', Buffer.from('hello, bucket\n')],
    ['blob.bin', randomBytes(300_001)],
    ['big.bin', randomBytes(9 * 1024 * 1024 + 7)],
    ['image.png', randomBytes(4096)],
  ];
  for (let i = 0; i < 12; i++) files.push([`small-${i}.txt`, Buffer.from(`file ${i} `.repeat(i + 1))]);
  const fd = new FormData();
  fd.append('pathPrefix', '/docs');
  for (const [name, bytes] of files) fd.append('file[]', new Blob([new Uint8Array(bytes)]), name);
  const res = await fetch(`${url}/api/v1/workspaces/${workspaceId}/storage/import`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}` },
    body: fd,
  });
  expect(res.status).toBe(201);
  const { fileIds } = (await res.json()) as { fileIds: string[] };
  expect(fileIds).toHaveLength(files.length);
  for (const [i, id] of fileIds.entries()) uploaded.set(id, (files[i] as [string, Buffer])[1]);
}, SLOW);

afterAll(async () => {
  await server?.close();
  await db?.drop();
  await s3?.close();
  fs.rmSync(s3Dir, { recursive: true, force: true });
  fs.rmSync(dataDir, { recursive: true, force: true });
});

describe('storage migrate', () => {
  it(
    'refuses to run without the bucket, and without --to',
    async () => {
      const noBucket = await runCliProcess(['storage', 'migrate', '--to', 's3'], baseEnv());
      expect(noBucket.code).toBe(1);
      expect(noBucket.stderr).toMatch(/S3_BUCKET is not set/);
      const noTarget = await runCliProcess(['storage', 'migrate'], baseEnv());
      expect(noTarget.code).toBe(2);
      expect(noTarget.stderr).toMatch(/--to/);
    },
    SLOW,
  );

  it(
    'moves every file to S3 (a dry run first), after which a server on S3 serves them all',
    async () => {
      const total = [...uploaded.values()].reduce((n, b) => n + b.length, 0);
      const dry = report(await cli('--to', 's3', '--dry-run', '--json'));
      expect(dry).toMatchObject({
        from: 'local',
        to: 's3',
        dryRun: true,
        objects: uploaded.size,
        bytes: total,
      });
      expect([dry.copied, dry.copiedBytes, dry.present, dry.missing, dry.failed]).toEqual([
        uploaded.size,
        total,
        0,
        [],
        [],
      ]);
      const bucket = new S3ObjectStore({
        bucket: 'moved',
        endpoint: s3Env.S3_ENDPOINT,
        accessKeyId: 'S3RVER',
        secretAccessKey: 'S3RVER',
        forcePathStyle: true,
        prefix: 'prod/',
      });
      const keys = (
        await server?.deps.em().execute<{ storage_key: string }[]>('select storage_key from storage_files')
      )?.map((r) => r.storage_key) as string[];
      for (const key of keys) expect(await bucket.head(key), key).toBeNull(); // the dry run wrote nothing

      const run = await cli('--to', 's3', '--json');
      const moved = report(run);
      expect(moved).toMatchObject({
        dryRun: false,
        objects: uploaded.size,
        copied: uploaded.size,
        copiedBytes: total,
      });
      expect(moved.failed).toEqual([]);
      // Byte for byte in the bucket, under the key prefix; the local files are untouched.
      const local = new LocalObjectStore(path.join(dataDir, 'objects'), 'x', () => '');
      for (const key of keys) {
        const a = await readAll((await local.get(key))?.body as Readable);
        const b = await readAll((await bucket.get(key))?.body as Readable);
        expect(sha(b), key).toBe(sha(a));
      }
      expect(fs.existsSync(path.join(s3Dir, 'moved', 'prod', 'ws'))).toBe(true);

      // Run again: nothing to copy, everything verified present.
      const again = report(await cli('--to', 's3', '--json'));
      expect([again.copied, again.present]).toEqual([0, uploaded.size]);

      await server?.close();
      await startServer(s3Env);
      expect(server?.deps.objects.kind).toBe('s3');
      await expectEveryFileServed();
    },
    SLOW,
  );

  it(
    'moves them back to local files (a fresh DATA_DIR/objects), and a local server serves them all',
    async () => {
      fs.rmSync(path.join(dataDir, 'objects'), { recursive: true, force: true });
      const human = await cli('--to', 'local');
      expect(human.code, human.stderr).toBe(0);
      expect(human.stdout).toMatch(
        new RegExp(`s3 → local: ${uploaded.size} object\\(s\\); ${uploaded.size} copied and verified`),
      );
      expect(human.stdout).toMatch(/start the server without S3_BUCKET/);
      await server?.close();
      await startServer();
      expect(server?.deps.objects.kind).toBe('local');
      await expectEveryFileServed();
    },
    SLOW,
  );
});

/** A store that fails a put after `okPuts` of them, halfway through its body (a crash mid-copy). */
function failingAfter(store: ObjectStore, okPuts: number): ObjectStore {
  let puts = 0;
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop !== 'put') return Reflect.get(target, prop, receiver);
      return async (key: string, body: Readable, opts?: PutOptions) => {
        if (++puts <= okPuts) return target.put(key, body, opts);
        const controller = new AbortController();
        body.once('data', () => controller.abort(new Error('interrupted')));
        return target.put(key, body, { ...opts, signal: controller.signal });
      };
    },
  }) as ObjectStore;
}

describe('migrateObjects', () => {
  it('resumes after an interruption, and copies again an object whose bytes differ in the target', async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-move-'));
    try {
      const from = new LocalObjectStore(path.join(root, 'a'), 'x', () => '');
      const to = new LocalObjectStore(path.join(root, 'b'), 'x', () => '');
      const items = Array.from({ length: 10 }, (_, i) => ({ key: `ws/w/${i}` }));
      const bytes = new Map(items.map((it, i) => [it.key, randomBytes(1000 + i * 7919)]));
      for (const [key, b] of bytes) await from.put(key, b);

      const first = await migrateObjects(items, from, failingAfter(to, 4), { concurrency: 1 });
      expect(first.copied).toBe(4);
      expect(first.failed).toHaveLength(6);
      // Nothing half-written is left where a reader would take it for the object.
      for (const f of first.failed) expect(await to.head(f.key)).toBeNull();

      // Tamper with one copied object, same size: the next run notices and copies it again.
      const tampered = items[1]?.key as string;
      await to.put(tampered, randomBytes((bytes.get(tampered) as Buffer).length));
      const second = await migrateObjects(items, from, to);
      expect([second.copied, second.present, second.failed]).toEqual([7, 3, []]);
      for (const [key, b] of bytes) {
        expect(sha(await readAll((await to.get(key))?.body as Readable)), key).toBe(sha(b));
      }
      // An object in neither store is reported, not invented.
      const third = await migrateObjects([...items, { key: 'ws/w/gone' }], from, to);
      expect(third.missing).toEqual(['ws/w/gone']);
      expect(third.present).toBe(10);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});
