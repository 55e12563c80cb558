import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { ListStorageInput, type StorageFileDto } from './schema.js';
import { StorageService } from './service.js';

let ts: TestServer;
let ws: TestWorkspace;
let other: TestWorkspace;
beforeAll(async () => {
  ts = await startTestServer();
  ws = await createTestWorkspace(ts);
  other = await createTestWorkspace(ts);
});
afterAll(() => ts?.close());

const base = (w: TestWorkspace = ws) => `/workspaces/${w.workspaceId}/storage`;
const svc = () => new StorageService(ts.server.deps.em(), ts.server.deps.objects);
const get = (path: string, w: TestWorkspace = ws) => ts.api(path, { key: w.apiKey });
const send = (method: string, path: string, json: unknown, w: TestWorkspace = ws) =>
  ts.api(path, { method, key: w.apiKey, json });

async function put(
  filename: string,
  content: string,
  path: string | null = '/',
  type: StorageFileDto['type'] = 'file',
  w = ws,
) {
  return svc().createFile({ workspaceId: w.workspaceId, type, filename, path, body: Buffer.from(content) });
}

describe('storage service API for other domains', () => {
  it('creates a file from a Buffer or a stream and reads it back', async () => {
    const file = await svc().createFile({
      workspaceId: ws.workspaceId,
      type: 'deliverable',
      filename: 'report.md',
      body: Buffer.from('# Report'),
      source: 'Autonomous run',
      sourceId: 'run_1',
    });
    expect(file).toMatchObject({
      type: 'deliverable',
      filename: 'report.md',
      mimeType: 'text/markdown',
      sizeBytes: 8,
      source: 'Autonomous run',
      sourceId: 'run_1',
      path: null,
      isIndexed: false,
      indexStatus: 'none',
      isGitHostMirror: false,
      externalRef: null,
    });
    expect((await svc().readContent(ws.workspaceId, file.id)).toString()).toBe('# Report');
    const { Readable } = await import('node:stream');
    const streamed = await svc().createFile({
      workspaceId: ws.workspaceId,
      type: 'image',
      filename: 'pic.png',
      body: Readable.from([Buffer.from([0x89, 0x50]), Buffer.from([0x4e, 0x47])]),
    });
    expect(streamed).toMatchObject({ mimeType: 'image/png', sizeBytes: 4 });
    const opened = await svc().openContent(ws.workspaceId, streamed.id, 'image');
    const chunks: Buffer[] = [];
    for await (const c of opened.body) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47]));
    await expect(svc().openContent(other.workspaceId, streamed.id)).rejects.toMatchObject({
      status: 404,
      message: 'File not found',
    });
  });

  it('refuses a second file at the same path unless asked to replace', async () => {
    await put('dup.txt', 'one', '/dups');
    await expect(put('dup.txt', 'two', '/dups')).rejects.toMatchObject({
      status: 409,
      code: 'STORAGE_PATH_CONFLICT',
    });
  });
});

describe('signed links (embedded store)', () => {
  it('serves a presigned URL, refuses a tampered or expired one', async () => {
    const file = await put('signed.txt', 'signed body', '/signed');
    const url = file.presignedUrl as string;
    expect(url.startsWith(`${ts.url}/api/v1/storage/objects/`)).toBe(true);
    const ok = await fetch(url);
    expect(ok.status).toBe(200);
    expect(ok.headers.get('content-type')).toBe('text/plain');
    expect(ok.headers.get('content-disposition')).toMatch(/^inline; filename="signed.txt"/);
    expect(await ok.text()).toBe('signed body');

    const u = new URL(url);
    const tampered = new URL(url);
    tampered.searchParams.set('ct', 'text/html');
    const expired = new URL(url);
    expired.searchParams.set('exp', String(Math.floor(Date.now() / 1000) - 1));
    const otherKey = new URL(url);
    otherKey.pathname = u.pathname.replace(/[0-9a-f]$/, (c) => (c === '0' ? '1' : '0'));
    for (const bad of [tampered, expired, otherKey]) {
      const res = await fetch(bad);
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual({ error: 'Invalid or expired link', code: 'INVALID_SIGNATURE' });
    }
    // A link signed with an expiry in the past is refused even with a valid signature.
    const store = ts.server.deps.objects;
    const past = await store.presign(u.pathname.split('/storage/objects/')[1] as string, { expiresIn: -5 });
    expect((await fetch(past)).status).toBe(403);
  });
});

describe('GET /storage (list)', () => {
  let lw: TestWorkspace;
  beforeAll(async () => {
    lw = await createTestWorkspace(ts);
    for (let i = 0; i < 3; i++) await put(`note-${i}.txt`, `n${i}`, '/notes', 'file', lw);
    await put('chart.png', 'png', '/', 'image', lw);
    await put('final-report.md', 'r', '/', 'deliverable', lw);
    await put('contract.pdf', 'pdf', '/', 'document', lw);
  });

  it('lists newest first with totals and hasMore', async () => {
    const res = await get(base(lw), lw);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { files: StorageFileDto[]; totals: unknown; hasMore: boolean };
    expect(body.totals).toEqual({ images: 1, deliverables: 1, documents: 1, files: 3 });
    expect(body.hasMore).toBe(false);
    expect(body.files.map((f) => f.filename)).toEqual([
      'contract.pdf',
      'final-report.md',
      'chart.png',
      'note-2.txt',
      'note-1.txt',
      'note-0.txt',
    ]);
    expect(body.files.every((f) => typeof f.presignedUrl === 'string')).toBe(true);
  });

  it('filters by type and search, limits, caps the limit at 200', async () => {
    let body = (await (await get(`${base(lw)}?type=files&limit=2`, lw)).json()) as {
      files: StorageFileDto[];
      hasMore: boolean;
    };
    expect(body.files.map((f) => f.filename)).toEqual(['note-2.txt', 'note-1.txt']);
    expect(body.hasMore).toBe(true);
    body = (await (await get(`${base(lw)}?type=images`, lw)).json()) as typeof body;
    expect(body.files.map((f) => f.type)).toEqual(['image']);
    body = (await (await get(`${base(lw)}?search=REPORT`, lw)).json()) as typeof body;
    expect(body.files.map((f) => f.filename)).toEqual(['final-report.md']);
    body = (await (await get(`${base(lw)}?search=%25`, lw)).json()) as typeof body;
    expect(body.files).toEqual([]);
    const capped = await get(`${base(lw)}?limit=5000`, lw);
    expect(capped.status).toBe(200);
  });

  it('defaults the page to 50 and caps it at 200', async () => {
    const pw = await createTestWorkspace(ts);
    for (let i = 0; i < 51; i++) await put(`p${i}.txt`, 'p', '/', 'file', pw);
    const body = (await (await get(base(pw), pw)).json()) as { files: unknown[]; hasMore: boolean };
    expect(body.files).toHaveLength(50);
    expect(body.hasMore).toBe(true);
    const all = (await (await get(`${base(pw)}?limit=1000`, pw)).json()) as {
      files: unknown[];
      hasMore: boolean;
    };
    expect(all).toMatchObject({ hasMore: false });
    expect(all.files).toHaveLength(51);
    expect(ListStorageInput.parse({ workspaceId: 'w', limit: '1000' }).limit).toBe(200);
    expect(ListStorageInput.parse({ workspaceId: 'w', limit: '0' }).limit).toBe(1);
    expect(ListStorageInput.parse({ workspaceId: 'w' }).limit).toBe(50);
  });

  it('answers 400 for an unknown type', async () => {
    const res = await get(`${base(lw)}?type=videos`, lw);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe(
      'Unknown type. Must be one of: all, images, deliverables, documents, files',
    );
  });

  it('answers 401 Unauthorized for another workspace id, 401 Invalid API key without a key', async () => {
    for (const path of [
      base(other),
      `${base(other)}/path`,
      `${base(other)}/content?fileId=x&fileType=file`,
    ]) {
      const res = await get(path, lw);
      expect(res.status).toBe(401);
      expect(await res.json()).toEqual({ error: 'Unauthorized' });
    }
    const res = await send('PATCH', `${base(other)}/files`, { fileId: 'x', newName: 'y' }, lw);
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Unauthorized' });
    const noKey = await ts.api(base(lw));
    expect(noKey.status).toBe(401);
    expect(await noKey.json()).toEqual({ error: 'Invalid API key' });
  });
});

describe('GET /storage/content', () => {
  it('streams the bytes with the stored type, inline', async () => {
    const file = await put('data.json', '{"a":1}', '/c');
    const res = await get(`${base()}/content?fileId=${file.id}&fileType=file`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(res.headers.get('content-disposition')).toMatch(/^inline/);
    expect(res.headers.get('content-length')).toBe('7');
    expect(await res.text()).toBe('{"a":1}');
  });

  it('answers the spec errors', async () => {
    const file = await put('empty.txt', '', '/c');
    const cases: [string, number, string][] = [
      ['', 400, 'Missing fileId or fileType'],
      [`?fileId=${file.id}`, 400, 'Missing fileId or fileType'],
      ['?fileType=file', 400, 'Missing fileId or fileType'],
      [`?fileId=${file.id}&fileType=image`, 404, 'File not found'],
      ['?fileId=00000000-0000-4000-8000-000000000000&fileType=file', 404, 'File not found'],
      ['?fileId=not-a-uuid&fileType=file', 404, 'File not found'],
      [`?fileId=${file.id}&fileType=file`, 404, 'Empty file'],
    ];
    for (const [q, status, error] of cases) {
      const res = await get(`${base()}/content${q}`);
      expect(res.status, q).toBe(status);
      expect(((await res.json()) as { error: string }).error, q).toBe(error);
    }
    const gone = await put('gone.txt', 'bye', '/c');
    const key = new URL(gone.presignedUrl as string).pathname.split('/storage/objects/')[1] as string;
    await ts.server.deps.objects.delete(key);
    const res = await get(`${base()}/content?fileId=${gone.id}&fileType=file`);
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'Storage key not found' });
  });

  it("does not serve another workspace's file", async () => {
    const mine = await put('mine.txt', 'secret', '/', 'file', other);
    const res = await get(`${base()}/content?fileId=${mine.id}&fileType=file`);
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'File not found' });
  });
});

describe('move and rename', () => {
  it('renames (default action) through both PATCH forms', async () => {
    const file = await put('draft.txt', 'd', '/mr');
    let res = await send('PATCH', `${base()}/files/${file.id}`, { newName: 'final.txt' });
    expect(res.status).toBe(200);
    let body = (await res.json()) as { file: StorageFileDto };
    expect(body.file).toMatchObject({ id: file.id, filename: 'final.txt', path: '/mr/final.txt' });
    res = await send('PATCH', `${base()}/files`, {
      fileId: file.id,
      action: 'rename',
      newName: 'final-v2.txt',
    });
    body = (await res.json()) as { file: StorageFileDto };
    expect(body.file).toMatchObject({ filename: 'final-v2.txt', path: '/mr/final-v2.txt' });
  });

  it('moves into a new folder (created), keeping the content', async () => {
    const file = await put('move-me.txt', 'payload', '/mr');
    const res = await send('PATCH', `${base()}/files`, {
      fileId: file.id,
      action: 'move',
      destFolderPath: 'archive/2026/',
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { file: StorageFileDto };
    expect(body.file.path).toBe('/archive/2026/move-me.txt');
    const c = await get(`${base()}/content?fileId=${file.id}&fileType=file`);
    expect(await c.text()).toBe('payload');
    const listing = (await (await get(`${base()}/path?path=/archive`)).json()) as {
      folders: { path: string }[];
    };
    expect(listing.folders.map((f) => f.path)).toEqual(['/archive/2026']);
  });

  it('answers 409 instead of overwriting, and the spec 400s and 404', async () => {
    const a = await put('a.txt', 'a', '/conf');
    await put('b.txt', 'b', '/conf');
    await put('a.txt', 'other a', '/conf2');
    let res = await send('PATCH', `${base()}/files/${a.id}`, { newName: 'b.txt' });
    expect(res.status).toBe(409);
    expect(await res.json()).toMatchObject({
      code: 'STORAGE_PATH_CONFLICT',
      details: { path: '/conf/b.txt' },
    });
    res = await send('PATCH', `${base()}/files/${a.id}`, { action: 'move', destFolderPath: '/conf2' });
    expect(res.status).toBe(409);

    const cases: [string, unknown, number, string][] = [
      [`${base()}/files`, { newName: 'x' }, 400, 'fileId is required'],
      [`${base()}/files/${a.id}`, { action: 'move' }, 400, 'destFolderPath is required for move'],
      [`${base()}/files/${a.id}`, {}, 400, 'newName is required for rename'],
      [`${base()}/files/${a.id}`, { action: 'delete' }, 400, 'action must be move or rename'],
      [
        `${base()}/files/${a.id}`,
        { newName: '../x' },
        400,
        'Invalid file name "../x": a name cannot contain a slash or backslash',
      ],
      [
        `${base()}/files/${a.id}`,
        { action: 'move', destFolderPath: '/a/../b' },
        400,
        'Invalid path "/a/../b": "." and ".." segments are not allowed',
      ],
      [
        `${base()}/files/${a.id}`,
        { action: 'move', destFolderPath: '/a//b' },
        400,
        'Invalid path "/a//b": duplicate slashes are not allowed',
      ],
      [
        `${base()}/files/${a.id}`,
        { action: 'move', destFolderPath: '/a\u0001b' },
        400,
        'Invalid path "/a\u0001b": control characters are not allowed',
      ],
      [`${base()}/files/00000000-0000-4000-8000-000000000000`, { newName: 'x' }, 404, 'File not found'],
    ];
    for (const [path, json, status, error] of cases) {
      const r = await send('PATCH', path, json);
      expect(r.status, JSON.stringify(json)).toBe(status);
      expect(((await r.json()) as { error: string }).error).toBe(error);
    }
    const foreign = await put('f.txt', 'f', '/', 'file', other);
    res = await send('PATCH', `${base()}/files/${foreign.id}`, { newName: 'stolen.txt' });
    expect(res.status).toBe(404);
  });
});

describe('invisible formatting characters in names', () => {
  // U+202E shows "\u202etxt.exe" as "exe.txt"; the others hide or reorder text the same way.
  const hostile = [
    '\u202etxt.exe',
    'a\u2066b',
    'zero\u200bwidth',
    'bom\ufeffx',
    'soft\u00adhyphen',
    'c1\u0085x',
  ];

  it('refuses them with 400 INVALID_PATH in rename, move, folder create and folder rename', async () => {
    const w = await createTestWorkspace(ts);
    const file = await put('doc.txt', 'd', '/bidi', 'file', w);
    await send('POST', `${base(w)}/folders`, { folderPath: '/bidi/sub' }, w);
    for (const name of hostile) {
      const attempts: [string, string, unknown][] = [
        ['PATCH', `${base(w)}/files/${file.id}`, { newName: name }],
        ['PATCH', `${base(w)}/files/${file.id}`, { action: 'move', destFolderPath: `/bidi/${name}` }],
        ['POST', `${base(w)}/folders`, { folderPath: `/bidi/${name}/deeper` }],
        ['PATCH', `${base(w)}/folders`, { folderPath: '/bidi/sub', newName: name }],
      ];
      for (const [method, path, json] of attempts) {
        const res = await send(method, path, json, w);
        expect(res.status, `${method} ${JSON.stringify(json)}`).toBe(400);
        const body = (await res.json()) as { error: string; code: string };
        expect(body.code).toBe('INVALID_PATH');
        expect(body.error).toMatch(/(control|invisible formatting) characters/);
      }
    }
    await expect(put('\u202etxt.exe', 'x', '/bidi', 'file', w)).rejects.toMatchObject({
      status: 400,
      code: 'INVALID_PATH',
    });
    // Nothing was renamed, moved or created.
    const tree = (await (await get(`${base(w)}/path?folderPath=/bidi&tree=1`, w)).json()) as {
      paths: string[];
    };
    expect(tree.paths).toEqual(['/bidi/doc.txt', '/bidi/sub/']);
  });

  it('names the character, and keeps zero-width joiners (emoji sequences, Persian, Indic scripts)', async () => {
    const w = await createTestWorkspace(ts);
    const file = await put('team.txt', 't', '/', 'file', w);
    const res = await send('PATCH', `${base(w)}/files/${file.id}`, { newName: '\u202etxt.exe' }, w);
    expect(await res.json()).toEqual({
      error:
        'Invalid file name "\u202etxt.exe": invisible formatting characters (here U+202E) are not allowed',
      code: 'INVALID_PATH',
    });
    for (const name of ['👨\u200d👩\u200d👧.txt', 'می\u200cخواهم.md']) {
      const ok = await send('PATCH', `${base(w)}/files/${file.id}`, { newName: name }, w);
      expect(ok.status, name).toBe(200);
      expect(((await ok.json()) as { file: { filename: string } }).file.filename).toBe(name);
    }
  });
});

describe('concurrent writes', () => {
  it('lets exactly one of several concurrent renames to the same name win', async () => {
    const files = await Promise.all([0, 1, 2, 3, 4].map((i) => put(`race-${i}.txt`, `r${i}`, '/race')));
    const results = await Promise.all(
      files.map((f) => send('PATCH', `${base()}/files/${f.id}`, { newName: 'winner.txt' })),
    );
    expect(results.map((r) => r.status).sort()).toEqual([200, 409, 409, 409, 409]);
    const listing = (await (await get(`${base()}/path?folderPath=/race`)).json()) as {
      files: StorageFileDto[];
    };
    expect(listing.files.filter((f) => f.filename === 'winner.txt')).toHaveLength(1);
    expect(listing.files).toHaveLength(5);
  });

  it('lets exactly one of several concurrent creates at the same path win', async () => {
    const results = await Promise.allSettled(
      [0, 1, 2, 3].map((i) => put('same.txt', `v${i}`, '/race-create')),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    for (const r of results.filter((x) => x.status === 'rejected')) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({
        status: 409,
        code: 'STORAGE_PATH_CONFLICT',
      });
    }
  });
});

describe('folders and path listing', () => {
  let fw: TestWorkspace;
  beforeAll(async () => {
    fw = await createTestWorkspace(ts);
  });
  const fbase = () => base(fw);

  it('creates a folder (201), idempotently, with its ancestors', async () => {
    let res = await send('POST', `${fbase()}/folders`, { folderPath: '/projects/alpha' }, fw);
    expect(res.status).toBe(201);
    const body = (await res.json()) as {
      created: boolean;
      folder: { id: string; name: string; path: string };
    };
    expect(body).toMatchObject({ created: true, folder: { name: 'alpha', path: '/projects/alpha' } });
    res = await send('POST', `${fbase()}/folders`, { folderPath: 'projects/alpha/' }, fw);
    expect(res.status).toBe(201);
    expect(await res.json()).toEqual({ created: false, folder: body.folder });
    res = await send('POST', `${fbase()}/folders`, {}, fw);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe('folderPath is required');
    res = await send('POST', `${fbase()}/folders`, { folderPath: '/../etc' }, fw);
    expect(res.status).toBe(400);
    // No folder under a file, no file where a folder is.
    const plain = await put('plain', 'p', '/projects', 'file', fw);
    res = await send('POST', `${fbase()}/folders`, { folderPath: '/projects/plain/sub' }, fw);
    expect(res.status).toBe(409);
    expect(await res.json()).toMatchObject({
      code: 'STORAGE_PATH_CONFLICT',
      details: { path: '/projects/plain' },
    });
    await expect(put('x.txt', 'x', '/projects/plain/deeper', 'file', fw)).rejects.toMatchObject({
      status: 409,
    });
    await expect(put('alpha', 'x', '/projects', 'file', fw)).rejects.toMatchObject({ status: 409 });
    await svc().deleteFile(fw.workspaceId, plain.id);
  });

  it('lists a folder in its three forms', async () => {
    await put('readme.md', 'r', '/projects', 'file', fw);
    await put('spec.md', 's', '/projects/alpha', 'file', fw);
    await put('deep.txt', 'd', '/projects/alpha/x/y', 'file', fw);
    await put('loose.png', 'p', null, 'image', fw);

    let res = await get(`${fbase()}/path?folderPath=/projects`, fw);
    expect(res.status).toBe(200);
    const children = (await res.json()) as {
      path: string;
      folders: { path: string }[];
      files: StorageFileDto[];
    };
    expect(children.path).toBe('/projects');
    expect(children.folders.map((f) => f.path)).toEqual(['/projects/alpha']);
    expect(children.files.map((f) => f.path)).toEqual(['/projects/readme.md']);

    const treePaths = [
      '/projects/',
      '/projects/alpha/',
      '/projects/alpha/spec.md',
      '/projects/alpha/x/',
      '/projects/alpha/x/y/',
      '/projects/alpha/x/y/deep.txt',
      '/projects/readme.md',
    ];
    for (const q of ['?tree=1', '?mode=tree', '?path=/&tree=1']) {
      res = await get(`${fbase()}/path${q}`, fw);
      expect(await res.json(), q).toEqual({ paths: treePaths });
    }
    res = await get(`${fbase()}/path?folderPath=/projects/alpha&tree=full`, fw);
    const full = (await res.json()) as { folders: { path: string }[]; files: StorageFileDto[] };
    expect(Object.keys(full).sort()).toEqual(['files', 'folders']);
    expect(full.folders.map((f) => f.path)).toEqual(['/projects/alpha/x', '/projects/alpha/x/y']);
    expect(full.files.map((f) => f.path)).toEqual([
      '/projects/alpha/spec.md',
      '/projects/alpha/x/y/deep.txt',
    ]);

    res = await get(`${fbase()}/path?folderPath=/nope`, fw);
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'Folder not found' });
    res = await get(`${fbase()}/path?tree=2`, fw);
    expect(res.status).toBe(400);
  });

  it('renames a folder: subfolders and files follow; conflicts are 409', async () => {
    let res = await send(
      'PATCH',
      `${fbase()}/folders`,
      { folderPath: '/projects/alpha', newName: 'beta' },
      fw,
    );
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      renamed: true,
      oldPath: '/projects/alpha',
      folder: { name: 'beta', path: '/projects/beta' },
      foldersMoved: 3,
      filesMoved: 2,
    });
    res = await get(`${fbase()}/path?folderPath=/projects&tree=1`, fw);
    expect(((await res.json()) as { paths: string[] }).paths).toEqual([
      '/projects/beta/',
      '/projects/beta/spec.md',
      '/projects/beta/x/',
      '/projects/beta/x/y/',
      '/projects/beta/x/y/deep.txt',
      '/projects/readme.md',
    ]);
    await send('POST', `${fbase()}/folders`, { folderPath: '/projects/gamma' }, fw);
    res = await send('PATCH', `${fbase()}/folders`, { folderPath: '/projects/gamma', newName: 'beta' }, fw);
    expect(res.status).toBe(409);
    res = await send(
      'PATCH',
      `${fbase()}/folders`,
      { folderPath: '/projects/gamma', newName: 'readme.md' },
      fw,
    );
    expect(res.status).toBe(409);
    res = await send('PATCH', `${fbase()}/folders`, { folderPath: '/projects/gamma' }, fw);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe('folderPath and newName are required');
    res = await send('PATCH', `${fbase()}/folders`, { folderPath: '/nope', newName: 'x' }, fw);
    expect(res.status).toBe(404);
    // Another workspace's folder of the same name is untouched.
    await put('keep.txt', 'k', '/projects/gamma', 'file', other);
    await send('PATCH', `${fbase()}/folders`, { folderPath: '/projects/gamma', newName: 'delta' }, fw);
    res = await get(`${base(other)}/path?folderPath=/projects/gamma`, other);
    expect(res.status).toBe(200);
  });
});

describe('GET /storage cursor', () => {
  it('walks every file of a filter exactly once with nextCursor, totals unchanged', async () => {
    const w = await createTestWorkspace(ts);
    // Created in one statement burst: many share a millisecond, so the cursor must order by more.
    await Promise.all(
      Array.from({ length: 23 }, (_, i) => put(`c${String(i).padStart(2, '0')}.txt`, 'x', '/cur', 'file', w)),
    );
    await put('other.md', 'x', null, 'deliverable', w);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const q: string = `?type=files&limit=5${cursor ? `&cursor=${cursor}` : ''}`;
      const page = (await (await get(`${base(w)}${q}`, w)).json()) as {
        files: StorageFileDto[];
        totals: Record<string, number>;
        hasMore: boolean;
        nextCursor: string | null;
      };
      expect(page.totals).toEqual({ images: 0, deliverables: 1, documents: 0, files: 23 });
      expect(page.hasMore).toBe(page.nextCursor !== null);
      seen.push(...page.files.map((f) => f.filename));
      cursor = page.nextCursor;
      pages++;
    } while (cursor);
    expect(pages).toBe(5);
    expect(seen).toHaveLength(23);
    expect(new Set(seen).size).toBe(23);
  });

  it('answers 400 Invalid cursor for a cursor it did not make', async () => {
    for (const cursor of ['nope', Buffer.from('{"t":"x","id":"y"}').toString('base64url')]) {
      const res = await get(`${base()}?cursor=${cursor}`);
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ error: 'Invalid cursor', code: 'INVALID_CURSOR' });
    }
  });
});

describe('DELETE /storage/files/{fileId}', () => {
  it('deletes the row and the object; a second delete and other workspaces get 404', async () => {
    const file = await put('gone.txt', 'bye', '/del');
    const key = (
      await ts.server.deps.em().execute('select storage_key from storage_files where id = ?', [file.id])
    )[0]?.storage_key as string;
    expect(await ts.server.deps.objects.head(key)).not.toBeNull();

    const foreign = await ts.api(`${base(other)}/files/${file.id}`, { method: 'DELETE', key: other.apiKey });
    expect(foreign.status).toBe(404);
    expect(await foreign.json()).toEqual({ error: 'File not found' });
    const wrongWs = await ts.api(`${base(other)}/files/${file.id}`, { method: 'DELETE', key: ws.apiKey });
    expect(wrongWs.status).toBe(401);

    const res = await ts.api(`${base()}/files/${file.id}`, { method: 'DELETE', key: ws.apiKey });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ deleted: true, fileId: file.id });
    expect(await ts.server.deps.objects.head(key)).toBeNull();
    const content = await get(`${base()}/content?fileId=${file.id}&fileType=file`);
    expect(content.status).toBe(404);
    const again = await ts.api(`${base()}/files/${file.id}`, { method: 'DELETE', key: ws.apiKey });
    expect(again.status).toBe(404);
    const bad = await ts.api(`${base()}/files/not-a-uuid`, { method: 'DELETE', key: ws.apiKey });
    expect(bad.status).toBe(404);
  });
});
