import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import zlib from 'node:zlib';
import { type FakeGitHost, startFakeGitHost } from '@ai-suite/testkit';
import tar from 'tar-stream';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import yazl from 'yazl';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { fileTooLarge } from './import.js';
import { StorageService } from './service.js';

const MB = 1024 * 1024;
let ts: TestServer;
let ws: TestWorkspace;
let git: FakeGitHost;

const SHA = 'a1b2c3d4e5f60718293a4b5c6d7e8f9012345678';
beforeAll(async () => {
  git = await startFakeGitHost({
    'acme/widgets': {
      defaultBranch: 'main',
      branches: {
        main: {
          sha: SHA,
          files: {
            'README.md': '# Widgets',
            'src/index.ts': 'export const x = 1;\n',
            'docs/guide/intro.md': 'intro',
            'link-to-readme': { symlink: 'README.md' },
          },
        },
        dev: { sha: 'ffffffffffffffffffffffffffffffffffffffff', files: { 'DEV.md': 'dev branch' } },
      },
    },
    'acme/secret': {
      defaultBranch: 'trunk',
      token: 'ghp_secret_token',
      branches: { trunk: { sha: SHA, files: { 'private.txt': 'classified' } } },
    },
    'acme/broken': { defaultBranch: 'main', tarballStatus: 500, branches: {} },
    'acme/huge': {
      defaultBranch: 'main',
      branches: {
        main: {
          sha: SHA,
          files: Object.fromEntries(
            Array.from({ length: 30 }, (_, i) => [`f${String(i).padStart(2, '0')}.txt`, 'x']),
          ),
        },
      },
    },
    'acme/sneaky': {
      defaultBranch: 'main',
      branches: { main: { sha: SHA, files: { '../../escape.txt': 'out', 'ok.txt': 'in' } } },
    },
    // A pax header of 8 MB before the first file: held in memory whole by the tar parser.
    'acme/paxbomb': {
      defaultBranch: 'main',
      branches: {
        main: { sha: SHA, files: {}, tarball: await tarGz([{ name: 'r/a.txt', body: 'a', pax: 8 * MB }]) },
      },
    },
    // One small file, then 64 MB of zero blocks after the end of the archive (inflated, never entries).
    'acme/trailing': {
      defaultBranch: 'main',
      branches: {
        main: { sha: SHA, files: {}, tarball: await tarGz([{ name: 'r/a.txt', body: 'a' }], 64 * MB) },
      },
    },
    'acme/spoof': {
      defaultBranch: 'main',
      branches: {
        main: {
          sha: SHA,
          files: {
            '.': 'dot',
            'a.txt': 'a',
            '\u202etxt.exe': 'spoof',
            'dir\u2067/inner.txt': 'hidden',
            'z.txt': 'z',
          },
        },
      },
    },
  });
  ts = await startTestServer({
    env: {
      GITHOST_API_URL: git.url,
      STORAGE_IMPORT_MAX_FILE_BYTES: String(1 * MB),
      STORAGE_IMPORT_MAX_ENTRIES: '20',
      STORAGE_IMPORT_MAX_TOTAL_BYTES: String(4 * MB),
    },
  });
  ws = await createTestWorkspace(ts);
});
afterAll(async () => {
  await ts?.close();
  await git?.close();
});

const base = (w: TestWorkspace = ws) => `/workspaces/${w.workspaceId}/storage`;

const OUTSIDE_ENTRIES =
  'Import stopped: the archive holds more than 1 MB outside its entries (pax or long-name headers, trailing data)';

/** A gzipped tar of `entries` (a pax `comment` of `pax` bytes on the first), then `trailing` zero bytes. */
async function tarGz(entries: { name: string; body: string; pax?: number }[], trailing = 0): Promise<Buffer> {
  const pack = tar.pack();
  const parts: Buffer[] = [];
  pack.on('data', (c: Buffer) => parts.push(c));
  const ended = new Promise((r) => pack.on('end', r));
  for (const e of entries) {
    pack.entry({ name: e.name, ...(e.pax ? { pax: { comment: 'c'.repeat(e.pax) } } : {}) }, e.body);
  }
  pack.finalize();
  await ended;
  return zlib.gzipSync(Buffer.concat([...parts, Buffer.alloc(trailing)]));
}

type Part = [name: string, value: string | Blob, filename?: string];
function form(parts: Part[]): FormData {
  const fd = new FormData();
  for (const [name, value, filename] of parts) {
    if (typeof value === 'string') fd.append(name, value);
    else fd.append(name, value, filename);
  }
  return fd;
}
const importForm = (parts: Part[], w: TestWorkspace = ws) =>
  ts.api(`${base(w)}/import`, { method: 'POST', key: w.apiKey, body: form(parts) });

interface ImportBody {
  imported: number;
  skipped: number;
  errors: { path: string; error: string }[];
  fileIds: string[];
  repo?: string;
  branch?: string;
}

async function zipOf(
  entries: { name: string; data?: Buffer | Readable; mode?: number; dir?: boolean }[],
  patch: [string, string][] = [],
): Promise<Blob> {
  const z = new yazl.ZipFile();
  for (const e of entries) {
    if (e.dir) z.addEmptyDirectory(e.name);
    else if (e.data instanceof Readable) z.addReadStream(e.data, e.name, { mode: e.mode });
    else z.addBuffer(e.data ?? Buffer.alloc(0), e.name, { mode: e.mode });
  }
  z.end();
  const chunks: Buffer[] = [];
  for await (const c of z.outputStream) chunks.push(c as Buffer);
  let buf = Buffer.concat(chunks);
  // yazl refuses unsafe names, so hostile ones are written over safe ones of the same length.
  for (const [from, to] of patch) {
    const a = Buffer.from(from);
    const b = Buffer.from(to);
    let i = buf.indexOf(a);
    while (i !== -1) {
      b.copy(buf, i);
      i = buf.indexOf(a, i + b.length);
    }
    buf = Buffer.from(buf);
  }
  return new Blob([buf], { type: 'application/zip' });
}

async function treeOf(prefix: string): Promise<string[]> {
  const res = await ts.api(`${base()}/path?folderPath=${encodeURIComponent(prefix)}&tree=1`, {
    key: ws.apiKey,
  });
  return ((await res.json()) as { paths: string[] }).paths;
}

describe('multipart import', () => {
  it('imports a folder: file[] parts keep their relative paths under pathPrefix', async () => {
    const res = await importForm([
      ['pathPrefix', 'uploads/site'],
      ['file[]', new Blob(['<h1>hi</h1>'], { type: 'text/html' }), 'site/index.html'],
      ['file[]', new Blob(['body{}']), 'site/css/main.css'],
    ]);
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    expect(body).toMatchObject({ imported: 2, skipped: 0, errors: [] });
    expect(body.fileIds).toHaveLength(2);
    expect(await treeOf('/uploads/site')).toEqual([
      '/uploads/site/site/',
      '/uploads/site/site/css/',
      '/uploads/site/site/css/main.css',
      '/uploads/site/site/index.html',
    ]);
  });

  it('reports unsafe relative paths per file and imports the rest', async () => {
    const res = await importForm([
      ['kind', 'files'],
      ['pathPrefix', '/safe'],
      ['file[]', new Blob(['x']), '../escape.txt'],
      ['file[]', new Blob(['x']), '/etc/abs.txt'],
      ['file[]', new Blob(['ok']), 'fine.txt'],
    ]);
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    expect(body.imported).toBe(1);
    expect(body.errors).toEqual([
      { path: '../escape.txt', error: 'Path escapes the import folder' },
      { path: '/etc/abs.txt', error: 'Absolute paths are not allowed' },
    ]);
    expect(await treeOf('/safe')).toEqual(['/safe/fine.txt']);
  });

  it('refuses "." and names with invisible formatting characters per file, importing the rest', async () => {
    const res = await importForm([
      ['kind', 'files'],
      ['pathPrefix', '/odd'],
      ['file[]', new Blob(['first']), 'first.txt'],
      ['file[]', new Blob(['x']), '.'],
      ['file[]', new Blob(['x']), './.'],
      ['file[]', new Blob(['x']), '\u202etxt.exe'],
      ['file[]', new Blob(['x']), 'sub\u200f/x.txt'],
      ['file[]', new Blob(['last']), 'sub/café.txt'],
    ]);
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    expect(body.imported).toBe(2);
    expect(body.errors).toEqual([
      { path: '.', error: 'Path names no file: "." and ".." are not allowed' },
      { path: './.', error: 'Path names no file: "." and ".." are not allowed' },
      {
        path: '\u202etxt.exe',
        error: 'Invalid path: invisible formatting characters (here U+202E) are not allowed',
      },
      {
        path: 'sub\u200f/x.txt',
        error: 'Invalid path: invisible formatting characters (here U+200F) are not allowed',
      },
    ]);
    // A UTF-8 file name arrives as written (not as latin-1 mojibake).
    expect(await treeOf('/odd')).toEqual(['/odd/first.txt', '/odd/sub/', '/odd/sub/café.txt']);
  });

  it('replaces a file re-imported at the same path (same id, new content)', async () => {
    const first = (await (
      await importForm([
        ['pathPrefix', '/re'],
        ['file[]', new Blob(['v1']), 'a.txt'],
      ])
    ).json()) as ImportBody;
    const second = (await (
      await importForm([
        ['pathPrefix', '/re'],
        ['file[]', new Blob(['version 2']), 'a.txt'],
      ])
    ).json()) as ImportBody;
    expect(second.fileIds).toEqual(first.fileIds);
    const c = await ts.api(`${base()}/content?fileId=${first.fileIds[0]}&fileType=file`, { key: ws.apiKey });
    expect(await c.text()).toBe('version 2');
  });

  it('answers 400 No files to import, Zip file is required, and for a bad kind', async () => {
    let res = await importForm([['kind', 'files']]);
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: 'No files to import' });
    res = await importForm([['pathPrefix', '/x']]);
    expect(await res.json()).toEqual({ error: 'No files to import' });
    res = await importForm([
      ['kind', 'zip'],
      ['file[]', new Blob(['x']), 'a.txt'],
    ]);
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: 'Zip file is required' });
    res = await importForm([['kind', 'tarball']]);
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: 'kind must be folder, zip or files' });
    res = await ts.api(`${base()}/import`, { method: 'POST', key: ws.apiKey, json: { kind: 'zip' } });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe('Invalid request body');
  });

  it('answers 413 when a file exceeds the upload limit', async () => {
    const res = await importForm([['file[]', new Blob([Buffer.alloc(MB + 1, 7)]), 'big.bin']]);
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({
      error: 'File big.bin exceeds the 1 MB upload limit',
      code: 'FILE_TOO_LARGE',
    });
    expect(fileTooLarge('report.pdf', 500 * MB).message).toBe(
      'File report.pdf exceeds the 500 MB upload limit',
    );
  });

  it('discards the partial object when the client goes away mid-upload', async () => {
    const objectsDir = path.join(ts.server.deps.config.dataDir, 'objects');
    const countFiles = (dir: string): number =>
      fs.existsSync(dir)
        ? fs
            .readdirSync(dir, { withFileTypes: true })
            .reduce((n, e) => n + (e.isDirectory() ? countFiles(path.join(dir, e.name)) : 1), 0)
        : 0;
    const before = countFiles(objectsDir);
    const boundary = 'abort-boundary';
    let sent = 0;
    let sawPart = false;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (sent === 0) {
          controller.enqueue(
            Buffer.from(
              `--${boundary}\r\nContent-Disposition: form-data; name="file[]"; filename="aborted.bin"\r\n\r\n`,
            ),
          );
        }
        if (sent < 512 * 1024) {
          controller.enqueue(Buffer.alloc(64 * 1024, 1));
          sent += 64 * 1024;
          return;
        }
        // Wait until the server is writing the part, then fail the upload.
        await vi.waitFor(
          () => {
            sawPart = countFiles(objectsDir) > before;
            expect(sawPart).toBe(true);
          },
          { timeout: 10_000 },
        );
        controller.error(new Error('client gave up'));
      },
    });
    await fetch(`${ts.url}/api/v1${base()}/import`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${ws.apiKey}`,
        'content-type': `multipart/form-data; boundary=${boundary}`,
      },
      body,
      duplex: 'half',
    } as RequestInit).catch(() => undefined);
    expect(sawPart).toBe(true);
    await vi.waitFor(() => expect(countFiles(objectsDir)).toBe(before), { timeout: 10_000 });
    const list = (await (await ts.api(`${base()}?search=aborted.bin`, { key: ws.apiKey })).json()) as {
      files: unknown[];
    };
    expect(list.files).toEqual([]);
  });

  it('answers 413 past the number of files one import may carry', async () => {
    const parts: Part[] = Array.from({ length: 21 }, (_, i) => ['file[]', new Blob(['x']), `many/${i}.txt`]);
    const res = await importForm(parts);
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({
      error: 'Too many files in one import (at most 20)',
      code: 'IMPORT_LIMIT_EXCEEDED',
    });
  });

  it('refuses another workspace and a bad key before reading the body', async () => {
    const other = await createTestWorkspace(ts);
    let res = await importForm([['file[]', new Blob(['x']), 'a.txt']], { ...other, apiKey: ws.apiKey });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Unauthorized' });
    res = await importForm([['file[]', new Blob(['x']), 'a.txt']], { ...ws, apiKey: 'svc_ai_bad' });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Invalid API key' });
  });
});

describe('zip import', () => {
  it('imports entries under the prefix, with folders', async () => {
    const zip = await zipOf([
      { name: 'docs/', dir: true },
      { name: 'docs/a.md', data: Buffer.from('# A') },
      { name: 'b.txt', data: Buffer.from('b') },
      { name: '__MACOSX/._b.txt', data: Buffer.from('junk') },
    ]);
    const res = await importForm([
      ['kind', 'zip'],
      ['pathPrefix', '/zipped'],
      ['file', zip, 'bundle.zip'],
    ]);
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    expect(body).toMatchObject({ imported: 2, skipped: 1, errors: [] });
    expect(await treeOf('/zipped')).toEqual(['/zipped/b.txt', '/zipped/docs/', '/zipped/docs/a.md']);
    const list = await ts.api(`${base()}?type=files&search=a.md`, { key: ws.apiKey });
    const { files } = (await list.json()) as { files: { path: string; mimeType: string; source: string }[] };
    expect(files[0]).toMatchObject({
      path: '/zipped/docs/a.md',
      mimeType: 'text/markdown',
      source: 'Zip import: bundle.zip',
    });
  });

  it('refuses zip-slip entries (../, absolute, backslash) and symlinks, one by one', async () => {
    const zip = await zipOf(
      [
        { name: 'aa/evil.txt', data: Buffer.from('evil') },
        { name: 'xetc/passwd', data: Buffer.from('root') },
        { name: 'aa\\b/win.txt', data: Buffer.from('win') },
        { name: 'link', data: Buffer.from('/etc/passwd'), mode: 0o120777 },
        { name: 'good.txt', data: Buffer.from('good') },
      ].map((e) => (e.name.includes('\\') ? { ...e, name: 'zz_b/win.txt' } : e)),
      [
        ['aa/evil.txt', '../evil.txt'],
        ['xetc/passwd', '/etc/passwd'],
        ['zz_b/win.txt', '..\\b/win.txt'],
      ],
    );
    const res = await importForm([
      ['kind', 'zip'],
      ['pathPrefix', '/slip'],
      ['file', zip, 'slip.zip'],
    ]);
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    expect(body.imported).toBe(1);
    expect(body.errors).toEqual([
      { path: '../evil.txt', error: 'Path escapes the import folder' },
      { path: '/etc/passwd', error: 'Absolute paths are not allowed' },
      { path: '../b/win.txt', error: 'Path escapes the import folder' },
      { path: 'link', error: 'Symbolic links are not imported' },
    ]);
    expect(await treeOf('/slip')).toEqual(['/slip/good.txt']);
    expect(await treeOf('/')).not.toContain('/evil.txt');
  });

  it('refuses "." entries and names with invisible formatting characters, importing the rest', async () => {
    const zip = await zipOf([
      { name: 'first.txt', data: Buffer.from('first') },
      { name: './', dir: true },
      { name: '.', data: Buffer.from('dot') },
      { name: './.', data: Buffer.from('dot') },
      { name: '\u202etxt.exe', data: Buffer.from('spoof') },
      { name: 'dir\u2066/', dir: true },
      { name: 'dir\u2066/inner.txt', data: Buffer.from('hidden') },
      { name: './sub/last.txt', data: Buffer.from('last') },
    ]);
    const res = await importForm([
      ['kind', 'zip'],
      ['pathPrefix', '/zdots'],
      ['file', zip, 'dots.zip'],
    ]);
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    expect(body.imported).toBe(2);
    const formatting = (code: string) =>
      `Invalid path: invisible formatting characters (here U+${code}) are not allowed`;
    expect(body.errors).toEqual([
      { path: '.', error: 'Path names no file: "." and ".." are not allowed' },
      { path: './.', error: 'Path names no file: "." and ".." are not allowed' },
      { path: '\u202etxt.exe', error: formatting('202E') },
      { path: 'dir\u2066/', error: formatting('2066') },
      { path: 'dir\u2066/inner.txt', error: formatting('2066') },
    ]);
    expect(await treeOf('/zdots')).toEqual(['/zdots/first.txt', '/zdots/sub/', '/zdots/sub/last.txt']);
  });

  it('stops a zip bomb (declared uncompressed total over the bound) before writing anything', async () => {
    const zeros = Readable.from(
      (function* () {
        for (let i = 0; i < 5; i++) yield Buffer.alloc(MB);
      })(),
    );
    const bomb = await zipOf([
      { name: 'small.txt', data: Buffer.from('s') },
      { name: 'zeros.bin', data: zeros },
    ]);
    expect(bomb.size).toBeLessThan(64 * 1024);
    const res = await importForm([
      ['kind', 'zip'],
      ['pathPrefix', '/bomb'],
      ['file', bomb, 'bomb.zip'],
    ]);
    expect(res.status).toBe(413);
    const body = (await res.json()) as { error: string; code: string };
    expect(body.code).toBe('IMPORT_LIMIT_EXCEEDED');
    expect(body.error).toMatch(/^Archive exceeds the import limits/);
    const tree = await ts.api(`${base()}/path?folderPath=/bomb`, { key: ws.apiKey });
    expect(tree.status).toBe(404);
  });

  it('stops an entry that inflates past its declared size while streaming', async () => {
    const zip = Buffer.from(
      await (await zipOf([{ name: 'liar.bin', data: Buffer.alloc(MB / 2) }])).arrayBuffer(),
    );
    const cd = zip.indexOf(Buffer.from([0x50, 0x4b, 0x01, 0x02]));
    expect(zip.readUInt32LE(cd + 24)).toBe(MB / 2);
    zip.writeUInt32LE(1000, cd + 24); // the central directory now claims 1000 bytes
    const res = await importForm([
      ['kind', 'zip'],
      ['pathPrefix', '/liar'],
      ['file', new Blob([zip]), 'liar.zip'],
    ]);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/^Invalid zip file: too many bytes/);
    expect(
      (await ts.api(`${base()}?search=liar.bin`, { key: ws.apiKey }).then((r) => r.json())) as unknown,
    ).toMatchObject({
      files: [],
    });
  });

  it('refuses an archive with more entries than the bound', async () => {
    const many = await zipOf(
      Array.from({ length: 21 }, (_, i) => ({ name: `f${i}.txt`, data: Buffer.from('x') })),
    );
    const res = await importForm([
      ['kind', 'zip'],
      ['file', many, 'many.zip'],
    ]);
    expect(res.status).toBe(413);
    expect(((await res.json()) as { code: string }).code).toBe('IMPORT_LIMIT_EXCEEDED');
  });

  it('refuses overlapping entries (more declared than deflate can make of the file) before writing', async () => {
    const zip = Buffer.from(
      await (await zipOf([{ name: 'o.bin', data: Buffer.alloc(MB / 2) }])).arrayBuffer(),
    );
    // Six central-directory records pointing at the one compressed entry: 3 MB from ~1 KB,
    // under the 4 MB total bound.
    const eocd = zip.length - 22;
    expect(zip.readUInt32LE(eocd)).toBe(0x06054b50);
    const cdSize = zip.readUInt32LE(eocd + 12);
    const cdOffset = zip.readUInt32LE(eocd + 16);
    const record = zip.subarray(cdOffset, cdOffset + cdSize);
    const end = Buffer.from(zip.subarray(eocd));
    end.writeUInt16LE(6, 8);
    end.writeUInt16LE(6, 10);
    end.writeUInt32LE(cdSize * 6, 12);
    const bomb = Buffer.concat([zip.subarray(0, cdOffset), ...Array.from({ length: 6 }, () => record), end]);
    const res = await importForm([
      ['kind', 'zip'],
      ['pathPrefix', '/overlap'],
      ['file', new Blob([bomb]), 'overlap.zip'],
    ]);
    expect(res.status).toBe(413);
    const body = (await res.json()) as { error: string; code: string; details: Record<string, number> };
    expect(body).toMatchObject({
      error: 'Archive declares more bytes than its size can hold (overlapping entries)',
      code: 'IMPORT_LIMIT_EXCEEDED',
      details: { declaredBytes: 3 * MB, archiveBytes: bomb.length, maxRatio: 1032 },
    });
    expect((await ts.api(`${base()}/path?folderPath=/overlap`, { key: ws.apiKey })).status).toBe(404);
  });

  it('answers 400 for a file that is not a zip', async () => {
    const res = await importForm([
      ['kind', 'zip'],
      ['file', new Blob(['not a zip at all']), 'x.zip'],
    ]);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/^Invalid zip file/);
  });
});

describe('git-host import', () => {
  const gh = (json: unknown) => ts.api(`${base()}/import/githost`, { method: 'POST', key: ws.apiKey, json });

  it('imports the default branch as a mirror with externalRef', async () => {
    git.requests.length = 0;
    const res = await gh({ repoUrl: 'https://github.com/acme/widgets.git', pathPrefix: '/repos/widgets' });
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    expect(body).toMatchObject({ imported: 3, skipped: 1, errors: [], repo: 'acme/widgets', branch: 'main' });
    expect(git.requests.map((r) => r.path)).toEqual([
      '/repos/acme/widgets',
      '/repos/acme/widgets/tarball/main',
    ]);
    expect(git.requests[0]?.authorization).toBeUndefined();
    expect(await treeOf('/repos/widgets')).toEqual([
      '/repos/widgets/README.md',
      '/repos/widgets/docs/',
      '/repos/widgets/docs/guide/',
      '/repos/widgets/docs/guide/intro.md',
      '/repos/widgets/src/',
      '/repos/widgets/src/index.ts',
    ]);
    const list = await ts.api(`${base()}?search=intro.md`, { key: ws.apiKey });
    const { files } = (await list.json()) as { files: Record<string, unknown>[] };
    expect(files[0]).toMatchObject({
      isGitHostMirror: true,
      path: '/repos/widgets/docs/guide/intro.md',
      externalRef: {
        provider: 'github',
        repo: 'acme/widgets',
        branch: 'main',
        commit: SHA.slice(0, 7),
        path: 'docs/guide/intro.md',
      },
    });
  });

  it('takes the branch from ?branch= or the body without asking for metadata', async () => {
    git.requests.length = 0;
    let res = await gh({ repoUrl: 'https://github.com/acme/widgets?branch=dev', pathPrefix: '/dev1' });
    expect(res.status).toBe(201);
    expect(await res.json()).toMatchObject({ imported: 1, branch: 'dev' });
    res = await gh({ repoUrl: 'https://github.com/acme/widgets', branch: 'dev', pathPrefix: '/dev2' });
    expect(await res.json()).toMatchObject({ imported: 1, branch: 'dev' });
    expect(git.requests.map((r) => r.path)).toEqual([
      '/repos/acme/widgets/tarball/dev',
      '/repos/acme/widgets/tarball/dev',
    ]);
  });

  it('uses the workspace token configured by the operator for private repositories', async () => {
    let res = await gh({ repoUrl: 'https://github.com/acme/secret' });
    expect(res.status).toBe(502);
    expect(await res.json()).toMatchObject({ error: 'GitHub archive fetch failed: 404 Not Found' });
    await new StorageService(ts.server.deps.em(), ts.server.deps.objects).setGitHostToken(
      ws.workspaceId,
      'ghp_secret_token',
    );
    git.requests.length = 0;
    res = await gh({ repoUrl: 'https://github.com/acme/secret', pathPrefix: '/secret' });
    expect(res.status).toBe(201);
    expect(await res.json()).toMatchObject({ imported: 1, branch: 'trunk', repo: 'acme/secret' });
    expect(git.requests.every((r) => r.authorization === 'Bearer ghp_secret_token')).toBe(true);
  });

  it('maps upstream failures to 502 with status and status text', async () => {
    let res = await gh({ repoUrl: 'https://github.com/acme/broken' });
    expect(res.status).toBe(502);
    expect(await res.json()).toEqual({
      error: 'GitHub archive fetch failed: 500 Internal Server Error',
      code: 'GITHOST_FETCH_FAILED',
    });
    res = await gh({ repoUrl: 'https://github.com/acme/widgets', branch: 'nope' });
    expect(await res.json()).toMatchObject({ error: 'GitHub archive fetch failed: 404 Not Found' });
    res = await gh({ repoUrl: 'https://github.com/acme/missing' });
    expect(await res.json()).toMatchObject({ error: 'GitHub archive fetch failed: 404 Not Found' });
  });

  it('stops a repository past the entry bound, keeping what was stored', async () => {
    const res = await gh({ repoUrl: 'https://github.com/acme/huge', pathPrefix: '/huge' });
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    // 20 entries allowed: the top folder plus 19 files.
    expect(body.imported).toBe(19);
    expect(body.errors).toHaveLength(1);
    expect(body.errors[0]?.error).toMatch(/^Import stopped: the archive exceeds the import limits/);
  });

  it('stops an archive whose headers the parser would hold whole (an 8 MB pax record)', async () => {
    const res = await gh({ repoUrl: 'https://github.com/acme/paxbomb', pathPrefix: '/paxbomb' });
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    expect(body.imported).toBe(0);
    expect(body.errors).toEqual([{ path: '', error: OUTSIDE_ENTRIES }]);
  });

  it('counts what the archive inflates to, not what its entries declare: trailing data stops it', async () => {
    const res = await gh({ repoUrl: 'https://github.com/acme/trailing', pathPrefix: '/trailing' });
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    expect(body.imported).toBe(1);
    expect(body.errors).toEqual([{ path: '', error: OUTSIDE_ENTRIES }]);
  });

  it('refuses tarball entries that escape the prefix', async () => {
    const res = await gh({ repoUrl: 'https://github.com/acme/sneaky', pathPrefix: '/sneaky' });
    const body = (await res.json()) as ImportBody;
    expect(body.imported).toBe(1);
    expect(body.errors).toEqual(
      ['../', '../../', '../../escape.txt'].map((path) => ({
        path,
        error: 'Path escapes the import folder',
      })),
    );
    expect(await treeOf('/sneaky')).toEqual(['/sneaky/ok.txt']);
  });

  it('refuses "." entries and names with invisible formatting characters, importing the rest', async () => {
    const res = await gh({ repoUrl: 'https://github.com/acme/spoof', pathPrefix: '/spoof' });
    expect(res.status).toBe(201);
    const body = (await res.json()) as ImportBody;
    expect(body.imported).toBe(2);
    const formatting = (code: string) =>
      `Invalid path: invisible formatting characters (here U+${code}) are not allowed`;
    expect(body.errors).toEqual([
      { path: '.', error: 'Path names no file: "." and ".." are not allowed' },
      { path: '\u202etxt.exe', error: formatting('202E') },
      { path: 'dir\u2067/', error: formatting('2067') },
      { path: 'dir\u2067/inner.txt', error: formatting('2067') },
    ]);
    expect(await treeOf('/spoof')).toEqual(['/spoof/a.txt', '/spoof/z.txt']);
  });

  it('validates repoUrl', async () => {
    let res = await gh({});
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe('repoUrl is required');
    for (const repoUrl of [
      'not a url',
      'https://github.com/acme',
      'https://github.com/acme/w/extra',
      'ftp://github.com/a/b',
      'https://github.com/../etc',
    ]) {
      res = await gh({ repoUrl });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toBe('Invalid GitHub repository URL');
    }
  });
});
