import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { CreateBucketCommand, DeleteBucketCommand } from '@aws-sdk/client-s3';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { S3ObjectStore } from '../../storage/s3-store.js';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import type { StorageFileDto } from './schema.js';

const MB = 1024 * 1024;
let s3: S3rver;
let s3Url: string;
let dir: string;
let ts: TestServer;
let ws: TestWorkspace;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 's3rver-'));
  s3 = new S3rver({
    address: '127.0.0.1',
    port: 0,
    silent: true,
    directory: dir,
    configureBuckets: [{ name: 'ai-suite' }],
  });
  const addr = await s3.run();
  s3Url = `http://127.0.0.1:${addr.port}`;
  ts = await startTestServer({
    env: {
      S3_BUCKET: 'ai-suite',
      S3_ENDPOINT: s3Url,
      S3_REGION: 'us-east-1',
      S3_ACCESS_KEY_ID: 'S3RVER',
      S3_SECRET_ACCESS_KEY: 'S3RVER',
      S3_FORCE_PATH_STYLE: 'true',
      // Clients reach the store under another name than the service does.
      S3_PUBLIC_ENDPOINT: s3Url.replace('127.0.0.1', 'localhost'),
    },
  });
  ws = await createTestWorkspace(ts);
});
afterAll(async () => {
  await ts?.close();
  await s3?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const base = () => `/workspaces/${ws.workspaceId}/storage`;

describe('S3 object store (s3rver on loopback)', () => {
  it('is selected by S3_BUCKET', () => {
    expect(ts.server.deps.objects.kind).toBe('s3');
  });

  it('imports into the bucket, serves content, and presigns a URL plain fetch can use', async () => {
    const fd = new FormData();
    fd.append('pathPrefix', '/s3');
    fd.append('file[]', new Blob(['hello from s3'], { type: 'text/plain' }), 'greeting.txt');
    const res = await ts.api(`${base()}/import`, { method: 'POST', key: ws.apiKey, body: fd });
    expect(res.status).toBe(201);
    const { fileIds } = (await res.json()) as { fileIds: string[] };

    const content = await ts.api(`${base()}/content?fileId=${fileIds[0]}&fileType=file`, { key: ws.apiKey });
    expect(content.status).toBe(200);
    expect(content.headers.get('content-type')).toBe('text/plain');
    expect(await content.text()).toBe('hello from s3');

    const list = (await (await ts.api(base(), { key: ws.apiKey })).json()) as { files: StorageFileDto[] };
    const url = list.files[0]?.presignedUrl as string;
    // Signed for S3_PUBLIC_ENDPOINT (the host is part of the signature), and it works there.
    expect(url.startsWith(`${s3Url.replace('127.0.0.1', 'localhost')}/ai-suite/ws/${ws.workspaceId}/`)).toBe(
      true,
    );
    const u = new URL(url);
    expect(u.searchParams.get('X-Amz-Expires')).toBe('900');
    const direct = await fetch(url);
    expect(direct.status).toBe(200);
    expect(await direct.text()).toBe('hello from s3');
  });

  it('streams a body larger than one part as a multipart upload, byte for byte', async () => {
    const store = ts.server.deps.objects as S3ObjectStore;
    const chunk = Buffer.alloc(MB);
    for (let i = 0; i < chunk.length; i++) chunk[i] = i % 251;
    const body = Readable.from(
      (function* () {
        for (let i = 0; i < 20; i++) yield chunk;
      })(),
    );
    const { size } = await store.put('test/big.bin', body, { contentType: 'application/octet-stream' });
    expect(size).toBe(20 * MB);
    expect(await store.head('test/big.bin')).toMatchObject({ size: 20 * MB });
    const got = await store.get('test/big.bin');
    let total = 0;
    let same = true;
    for await (const c of got?.body ?? []) {
      const b = c as Buffer;
      for (let i = 0; i < b.length && same; i += 4099) same = b[i] === ((total + i) % MB) % 251;
      total += b.length;
    }
    expect(total).toBe(20 * MB);
    expect(same).toBe(true);
    await store.delete('test/big.bin');
    expect(await store.head('test/big.bin')).toBeNull();
    expect(await store.get('test/big.bin')).toBeNull();
  });

  it('answers Storage key not found when the object vanished from the bucket', async () => {
    const fd = new FormData();
    fd.append('file[]', new Blob(['x']), 'vanish.txt');
    const { fileIds } = (await (
      await ts.api(`${base()}/import`, { method: 'POST', key: ws.apiKey, body: fd })
    ).json()) as {
      fileIds: string[];
    };
    const list = (await (await ts.api(`${base()}?search=vanish`, { key: ws.apiKey })).json()) as {
      files: StorageFileDto[];
    };
    const key = new URL(list.files[0]?.presignedUrl as string).pathname.replace('/ai-suite/', '');
    await ts.server.deps.objects.delete(key);
    const res = await ts.api(`${base()}/content?fileId=${fileIds[0]}&fileType=file`, { key: ws.apiKey });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'Storage key not found' });
  });
});

describe('S3 misconfiguration and deletes', () => {
  const s3Env = (over: Record<string, string>) => ({
    S3_BUCKET: 'ai-suite',
    S3_ENDPOINT: s3Url,
    S3_ACCESS_KEY_ID: 'S3RVER',
    S3_SECRET_ACCESS_KEY: 'S3RVER',
    S3_FORCE_PATH_STYLE: 'true',
    ...over,
  });

  it('refuses to start on a bucket that does not exist or with refused credentials, saying why', async () => {
    await expect(startTestServer({ env: s3Env({ S3_BUCKET: 'no-such-bucket' }) })).rejects.toThrow(
      `S3 bucket "no-such-bucket" at ${s3Url} does not exist (S3_BUCKET)`,
    );
    await expect(startTestServer({ env: s3Env({ S3_ACCESS_KEY_ID: 'NOBODY' }) })).rejects.toThrow(
      /^S3 bucket "ai-suite" at .+ refused access \(HTTP 403\): check S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY/,
    );
  });

  it('/readyz answers 503 with the reason when the bucket goes away, and ready again when it is back', async () => {
    expect(await (await fetch(`${ts.url}/readyz`)).json()).toMatchObject({
      status: 'ready',
      objectStore: 's3',
    });
    const admin = (ts.server.deps.objects as S3ObjectStore).client;
    await admin.send(new CreateBucketCommand({ Bucket: 'spare' }));
    const other = await startTestServer({ env: s3Env({ S3_BUCKET: 'spare' }) });
    try {
      expect((await fetch(`${other.url}/readyz`)).status).toBe(200);
      await admin.send(new DeleteBucketCommand({ Bucket: 'spare' }));
      const down = await fetch(`${other.url}/readyz`);
      expect(down.status).toBe(503);
      expect(await down.json()).toEqual({
        error: 'Service temporarily unavailable',
        details: { objectStore: `S3 bucket "spare" at ${s3Url} does not exist (S3_BUCKET)` },
      });
      await admin.send(new CreateBucketCommand({ Bucket: 'spare' }));
      expect((await fetch(`${other.url}/readyz`)).status).toBe(200);
    } finally {
      await other.close();
    }
  });

  it('DELETE removes the object from the bucket and the row', async () => {
    const fd = new FormData();
    fd.append('file[]', new Blob(['to delete']), 'delete-me.txt');
    const { fileIds } = (await (
      await ts.api(`${base()}/import`, { method: 'POST', key: ws.apiKey, body: fd })
    ).json()) as { fileIds: string[] };
    const list = (await (await ts.api(`${base()}?search=delete-me`, { key: ws.apiKey })).json()) as {
      files: StorageFileDto[];
    };
    const key = new URL(list.files[0]?.presignedUrl as string).pathname.replace('/ai-suite/', '');
    expect(await ts.server.deps.objects.head(key)).not.toBeNull();
    const res = await ts.api(`${base()}/files/${fileIds[0]}`, { method: 'DELETE', key: ws.apiKey });
    expect(await res.json()).toEqual({ deleted: true, fileId: fileIds[0] });
    expect(await ts.server.deps.objects.head(key)).toBeNull();
    const after = (await (await ts.api(`${base()}?search=delete-me`, { key: ws.apiKey })).json()) as {
      files: StorageFileDto[];
    };
    expect(after.files).toEqual([]);
  });
});
