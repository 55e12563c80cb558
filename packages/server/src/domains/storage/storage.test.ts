import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
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

function form(parts: [string, string | Blob, string?][]): FormData {
  const fd = new FormData();
  for (const [name, value, filename] of parts) {
    if (typeof value === 'string') fd.append(name, value);
    else fd.append(name, value, filename);
  }
  return fd;
}

describe('storage service API for other domains', () => {
  it('creates a file from a Buffer and reads it back', async () => {
    const file = await svc().createFile({
      workspaceId: ws.workspaceId,
      type: 'deliverable',
      filename: 'report.md',
      body: Buffer.from('# Report'),
      source: 'Run',
      sourceId: 'run_1',
    });
    expect(file).toMatchObject({
      type: 'deliverable',
      filename: 'report.md',
      mimeType: 'text/markdown',
      sizeBytes: 8,
      path: null,
      isIndexed: false,
      indexStatus: 'none',
      isGitHostMirror: false,
    });
    expect((await svc().readContent(ws.workspaceId, file.id)).toString()).toBe('# Report');
    const viaUrl = await fetch(file.presignedUrl as string);
    expect(viaUrl.status).toBe(200);
    expect(await viaUrl.text()).toBe('# Report');
  });
});

describe('import and content', () => {
  it('imports files keeping folders and serves their content', async () => {
    const res = await ts.api(`${base()}/import`, {
      method: 'POST',
      key: ws.apiKey,
      body: form([
        ['kind', 'files'],
        ['pathPrefix', '/proj'],
        ['file[]', new Blob(['hello']), 'src/a.txt'],
        ['file[]', new Blob(['{"x":1}'], { type: 'application/json' }), 'b.json'],
      ]),
    });
    expect(res.status).toBe(201);
    const body = (await res.json()) as { imported: number; fileIds: string[] };
    expect(body).toMatchObject({ imported: 2, skipped: 0, errors: [] });
    const c = await ts.api(`${base()}/content?fileId=${body.fileIds[0]}&fileType=file`, { key: ws.apiKey });
    expect(c.status).toBe(200);
    expect(c.headers.get('content-type')).toBe('text/plain');
    expect(c.headers.get('content-disposition')).toMatch(/^inline/);
    expect(await c.text()).toBe('hello');
    const tree = await ts.api(`${base()}/path?tree=1`, { key: ws.apiKey });
    expect(await tree.json()).toEqual({ paths: ['/proj/', '/proj/b.json', '/proj/src/', '/proj/src/a.txt'] });
  });

  it('refuses another workspace', async () => {
    const res = await ts.api(`${base(other)}`, { key: ws.apiKey });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Unauthorized' });
  });
});
