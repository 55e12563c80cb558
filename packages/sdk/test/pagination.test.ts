import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AiSuite, PagePromise } from '../src/index.js';

let ts: TestServer & { fake: FakeOpenAI };
let client: AiSuite;
const requests: string[] = [];

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RUN_POLL_INTERVAL_MS: '100' } });
  const ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  const counting: typeof fetch = (input, init) => {
    requests.push(
      `${init?.method ?? 'GET'} ${new URL(String(input)).pathname}${new URL(String(input)).search}`,
    );
    return fetch(input, init);
  };
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, maxRetries: 0, fetch: counting });
});
afterAll(() => ts?.close());

async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

describe('auto-paginating lists', () => {
  it('iterates every agent; awaiting still gives the envelope', async () => {
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await client.agents.create({ name: `A${i}` })).agent.id);
    const page = client.agents.list();
    expect(page).toBeInstanceOf(PagePromise);
    expect((await page).agents.map((a) => a.id)).toEqual(ids);
    const seen: string[] = [];
    for await (const agent of client.agents.list()) seen.push(agent.id);
    expect(seen).toEqual(ids);
  });

  it('walks offset pages of sessions with their total, one request per page, newest first', async () => {
    const { agent } = await client.agents.create({ name: 'Many sessions' });
    const created: string[] = [];
    for (let i = 0; i < 7; i++) created.push((await client.sessions.create(agent.id)).session.id);
    requests.length = 0;
    const sessions = await all(client.sessions.list(agent.id, { limit: 3 }));
    expect(sessions.map((s) => s.id).sort()).toEqual([...created].sort());
    expect(requests.filter((r) => r.includes('/sessions'))).toEqual([
      `GET /api/v1/managed-agents/agents/${agent.id}/sessions?limit=3`,
      `GET /api/v1/managed-agents/agents/${agent.id}/sessions?limit=3&offset=3`,
      `GET /api/v1/managed-agents/agents/${agent.id}/sessions?limit=3&offset=6`,
    ]);
    // Breaking out early stops fetching.
    requests.length = 0;
    for await (const s of client.sessions.list(agent.id, { limit: 2 })) if (s) break;
    expect(requests).toHaveLength(1);
    // Whole pages.
    const sizes: number[] = [];
    for await (const p of client.sessions.list(agent.id, { limit: 4 }).pages()) sizes.push(p.sessions.length);
    expect(sizes).toEqual([4, 3]);
  });

  it('walks runs (offset and total) and widget tokens and apps ({data, meta})', async () => {
    const { agent } = await client.agents.create({
      name: 'Runner',
      config: { capabilities: { deliverables: { enabled: true } } },
    });
    const runIds: string[] = [];
    for (let i = 0; i < 4; i++) runIds.push((await client.runs.create(agent.id, { task: `t${i}` })).runId);
    const first = await client.runs.list(agent.id, { limit: 500 }); // clamped to 100, not refused
    expect(first.total).toBe(4);
    expect((await all(client.runs.list(agent.id, { limit: 1 }))).map((r) => r.id)).toEqual(
      [...runIds].reverse(),
    );

    for (let i = 0; i < 3; i++) await client.widgetTokens.create({ name: `w${i}` });
    const tokens = await all(client.widgetTokens.list({ limit: 2 }));
    expect(tokens.map((t) => t.name).sort()).toEqual(['w0', 'w1', 'w2']);

    for (let i = 0; i < 3; i++) await client.apps.create({ name: `App ${i}` });
    expect((await all(client.apps.list({ limit: 2 }))).map((a) => a.name).sort()).toEqual([
      'App 0',
      'App 1',
      'App 2',
    ]);
  });

  it('walks storage with the cursor, keeping the spec fields on each page', async () => {
    await client.storage.import({
      files: Array.from({ length: 5 }, (_, i) => ({
        path: `pages/f${i}.txt`,
        content: new TextEncoder().encode(`${i}`),
      })),
    });
    const first = await client.storage.list({ type: 'files', limit: 2 });
    expect(first).toMatchObject({ hasMore: true, totals: { files: 5 } });
    expect(typeof first.nextCursor).toBe('string');
    const files = await all(client.storage.list({ type: 'files', limit: 2 }));
    expect(files.map((f) => f.filename).sort()).toEqual(['f0.txt', 'f1.txt', 'f2.txt', 'f3.txt', 'f4.txt']);
    const gone = files[0]?.id as string;
    expect(await client.storage.delete(gone)).toEqual({ deleted: true, fileId: gone });
    expect((await client.storage.list({ type: 'files' })).totals.files).toBe(4);
  });

  it('lists the models a caller may pass', async () => {
    const models = await all(client.models.list());
    expect(models).toEqual([
      expect.objectContaining({ id: 'fake-chat', kind: 'chat', default: true, inputPricePerMTok: 1 }),
      expect.objectContaining({ id: 'fake-embed', kind: 'embedding', default: true }),
    ]);
    expect((await client.models.list({ kind: 'chat' })).models.map((m) => m.id)).toEqual(['fake-chat']);
  });
});
