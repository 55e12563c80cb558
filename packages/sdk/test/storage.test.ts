import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { createTestWorkspace, startTestServer, type TestServer } from '@ai-suite/server/test-harness';
import { type FakeGitHost, startFakeGitHost } from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import yazl from 'yazl';
import {
  AiSuite,
  BadRequestError,
  ConflictError,
  NotFoundError,
  type PathTree,
  StorageUploadError,
  toFile,
} from '../src/index.js';

let ts: TestServer;
let git: FakeGitHost;
let client: AiSuite;
let tmp: string;

beforeAll(async () => {
  git = await startFakeGitHost({
    'octo/hello': {
      defaultBranch: 'main',
      branches: {
        main: {
          sha: '0123456789abcdef0123456789abcdef01234567',
          files: { 'README.md': '# hello', 'lib/a.js': 'a' },
        },
      },
    },
  });
  ts = await startTestServer({ env: { GITHOST_API_URL: git.url } });
  const ws = await createTestWorkspace(ts);
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey });
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-storage-'));
});
afterAll(async () => {
  await ts?.close();
  await git?.close();
  fs.rmSync(tmp, { recursive: true, force: true });
});

async function zipFile(entries: Record<string, string>): Promise<string> {
  const z = new yazl.ZipFile();
  for (const [name, content] of Object.entries(entries)) z.addBuffer(Buffer.from(content), name);
  z.end();
  const file = path.join(tmp, `z-${Math.random().toString(36).slice(2)}.zip`);
  await new Promise<void>((resolve, reject) =>
    z.outputStream.pipe(fs.createWriteStream(file)).on('close', resolve).on('error', reject),
  );
  return file;
}

describe('client.storage against the real server', () => {
  it('imports Buffers, Blobs, Node streams and file paths, keeping folders', async () => {
    const onDisk = path.join(tmp, 'disk.txt');
    fs.writeFileSync(onDisk, 'from disk');
    const result = await client.storage.import({
      pathPrefix: '/sdk',
      files: [
        { path: 'buf.txt', content: Buffer.from('from buffer') },
        {
          path: 'nested/blob.json',
          content: new Blob(['{"b":1}'], { type: 'application/json' }),
          type: 'application/json',
        },
        {
          path: 'nested/deeper/stream.txt',
          content: Readable.from([Buffer.from('from '), Buffer.from('stream')]),
        },
        { path: 'disk.txt', content: { filePath: onDisk } },
      ],
    });
    expect(result).toMatchObject({ imported: 4, skipped: 0, errors: [] });
    const tree = (await client.storage.tree('/sdk', 'paths')) as PathTree;
    expect(tree.paths).toEqual([
      '/sdk/buf.txt',
      '/sdk/disk.txt',
      '/sdk/nested/',
      '/sdk/nested/blob.json',
      '/sdk/nested/deeper/',
      '/sdk/nested/deeper/stream.txt',
    ]);
    const { files } = await client.storage.list({ type: 'files', search: 'stream' });
    expect(files).toHaveLength(1);
    const res = await client.storage.read(files[0]?.id as string, 'file');
    expect(await res.text()).toBe('from stream');
  });

  it('imports a zip given as a file path or a stream', async () => {
    const zip = await zipFile({ 'a.md': '# a', 'dir/b.md': '# b' });
    let result = await client.storage.import({ zip: { filePath: zip }, pathPrefix: '/zip1' });
    expect(result).toMatchObject({ imported: 2, errors: [] });
    result = await client.storage.import({
      zip: fs.createReadStream(zip),
      filename: 'z.zip',
      pathPrefix: '/zip2',
    });
    expect(result.imported).toBe(2);
    const listing = await client.storage.tree('/zip2');
    expect(listing.folders.map((f) => f.path)).toEqual(['/zip2/dir']);
    expect(listing.files.map((f) => f.filename)).toEqual(['a.md']);
    const full = await client.storage.tree('/zip2', 'full');
    expect(full.files.map((f) => f.path)).toEqual(['/zip2/a.md', '/zip2/dir/b.md']);
  });

  it('moves and renames files and folders, with typed errors', async () => {
    const { fileIds } = await client.storage.import({
      pathPrefix: '/mv',
      files: [
        { path: 'one.txt', content: Buffer.from('1') },
        { path: 'two.txt', content: Buffer.from('2') },
      ],
    });
    const [one, two] = fileIds as [string, string];
    const renamed = await client.storage.rename(one, 'uno.txt');
    expect(renamed.file.path).toBe('/mv/uno.txt');
    const moved = await client.storage.move(two, '/mv/sub');
    expect(moved.file.path).toBe('/mv/sub/two.txt');
    await expect(client.storage.rename(one, 'uno.txt')).resolves.toMatchObject({
      file: { path: '/mv/uno.txt' },
    });
    await client.storage.move(one, '/mv/sub');
    const conflict = await client.storage.rename(one, 'two.txt').catch((e: unknown) => e);
    expect(conflict).toBeInstanceOf(ConflictError);
    expect((conflict as ConflictError).status).toBe(409);

    const created = await client.storage.createFolder('/mv/empty');
    expect(created).toMatchObject({ created: true, folder: { name: 'empty', path: '/mv/empty' } });
    const r = await client.storage.renameFolder('/mv/sub', 'moved');
    expect(r).toMatchObject({ folder: { path: '/mv/moved' }, filesMoved: 2 });
    const nf = await client.storage
      .read('00000000-0000-4000-8000-000000000000', 'file')
      .catch((e: unknown) => e);
    expect(nf).toBeInstanceOf(NotFoundError);
    expect((nf as NotFoundError).message).toBe('File not found');
    const bad = await client.storage.import({ files: [] }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(BadRequestError);
    expect((bad as BadRequestError).message).toBe('No files to import');
  });

  it('imports a repository from the git host', async () => {
    const result = await client.storage.importGitHost({
      repoUrl: 'https://github.com/octo/hello',
      pathPrefix: '/gh',
    });
    expect(result).toMatchObject({ imported: 2, repo: 'octo/hello', branch: 'main', errors: [] });
    const { files } = await client.storage.list({ search: 'README' });
    expect(files[0]).toMatchObject({
      isGitHostMirror: true,
      externalRef: { repo: 'octo/hello', branch: 'main', commit: '0123456' },
    });
    const err = await client.storage.importGitHost({ repoUrl: 'nope' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BadRequestError);
    expect((err as BadRequestError).message).toBe('Invalid GitHub repository URL');
  });
});

describe('client.storage.upload and toFile', () => {
  const text = async (fileId: string) => (await client.storage.read(fileId, 'file')).text();

  it('uploads a path, bytes, a Blob, a File, a web stream, a Node stream and a Response into a folder', async () => {
    const onDisk = path.join(tmp, 'on-disk.md');
    fs.writeFileSync(onDisk, '# from disk');
    const uploads = [
      await client.storage.upload(onDisk, { folder: '/up' }),
      await client.storage.upload(toFile(Buffer.from('buffer'), 'buffer.txt'), { folder: '/up' }),
      await client.storage.upload(new Blob(['blob']), { name: 'blob.txt', folder: '/up' }),
      await client.storage.upload(new File(['file'], 'file.txt', { type: 'text/plain' }), { folder: '/up' }),
      await client.storage.upload(new Blob(['web stream']).stream(), { name: 'web.txt', folder: '/up' }),
      await client.storage.upload(fs.createReadStream(onDisk), { folder: '/up/node' }),
      await client.storage.upload(Readable.from([Buffer.from('readable')]), {
        name: 'readable.txt',
        folder: '/up',
      }),
      await client.storage.upload(new Response('response', { headers: { 'content-type': 'text/csv' } }), {
        name: 'response.csv',
        folder: '/up',
      }),
    ];
    expect(uploads.map((u) => u.imported)).toEqual(Array(8).fill(1));
    expect(await Promise.all(uploads.map((u) => text(u.fileId)))).toEqual([
      '# from disk',
      'buffer',
      'blob',
      'file',
      'web stream',
      '# from disk',
      'readable',
      'response',
    ]);
    const { files } = await client.storage.tree('/up');
    expect(files.map((f) => f.filename).sort()).toEqual(
      ['blob.txt', 'buffer.txt', 'file.txt', 'on-disk.md', 'readable.txt', 'response.csv', 'web.txt'].sort(),
    );
    expect(files.find((f) => f.filename === 'response.csv')?.mimeType).toBe('text/csv');
    expect((await client.storage.tree('/up/node')).files.map((f) => f.filename)).toEqual(['on-disk.md']);
    // The same path again replaces the file (as import does).
    const again = await client.storage.upload(toFile(Buffer.from('newer'), 'buffer.txt'), { folder: '/up' });
    expect(await text(again.fileId)).toBe('newer');
    // The raw response on request.
    const { response } = await client.storage
      .upload(Buffer.from('x'), { name: 'x.txt', folder: '/up' })
      .withResponse();
    expect(response.status).toBe(201);
  });

  it('refuses what it cannot name, and reports a name the server refuses', async () => {
    expect(() => toFile(Buffer.from('x'))).toThrow(/needs a name/);
    expect(() => toFile(new URL('https://example.com/a.txt'))).toThrow(/file: URLs/);
    expect(toFile(new URL(`file://${path.join(tmp, 'a b.txt')}`))).toMatchObject({
      name: 'a b.txt',
      content: { filePath: path.join(tmp, 'a b.txt') },
    });
    expect(toFile(new File(['x'], 'a.txt', { type: 'text/plain' }), 'renamed.md')).toMatchObject({
      name: 'renamed.md',
      type: 'text/plain',
    });
    await expect(client.storage.upload(Buffer.from('x'))).rejects.toThrow(TypeError);
    const err = await client.storage
      .upload(Buffer.from('x'), { name: `${'n'.repeat(300)}.txt`, folder: '/up' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StorageUploadError);
    expect((err as StorageUploadError).message).toMatch(/^Invalid (path|file name)/);
    // A folder that escapes the tree is refused before anything is stored.
    await expect(
      client.storage.upload(Buffer.from('x'), { name: 'y.txt', folder: '/../etc' }),
    ).rejects.toThrow(BadRequestError);
  });
});
