import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

let ts: TestServer;
let ws: TestWorkspace;
let other: TestWorkspace;
let appId: string;

const json = async <T = any>(res: Response): Promise<T> => (await res.json()) as T;

beforeAll(async () => {
  ts = await startTestServer();
  ws = await createTestWorkspace(ts);
  other = await createTestWorkspace(ts);
  const res = await ts.api('/apps', {
    method: 'POST',
    key: ws.apiKey,
    json: { name: 'Tutor', systemPrompt: 'Be kind.' },
  });
  appId = (await json(res)).app.id;
});
afterAll(() => ts?.close());

describe('apps CRUD (extension)', () => {
  it('creates, lists, reads, updates and deletes apps of the workspace only', async () => {
    const created = await ts.api('/apps', {
      method: 'POST',
      key: ws.apiKey,
      json: {
        name: ' Helper ',
        description: 'd',
        model: 'm1',
        controls: { temperature: 0.3, maxContextMessages: 5 },
      },
    });
    expect(created.status).toBe(201);
    const { app } = await json(created);
    expect(app).toMatchObject({
      appType: 'app',
      name: 'Helper',
      description: 'd',
      systemPrompt: null,
      model: 'm1',
      controls: { temperature: 0.3, maxContextMessages: 5 },
      status: 'active',
    });

    const list = await json(await ts.api('/apps', { key: ws.apiKey }));
    expect(list.data.map((a: { id: string }) => a.id)).toContain(app.id);
    expect(list.meta).toMatchObject({ limit: 50, offset: 0 });
    const otherList = await json(await ts.api('/apps', { key: other.apiKey }));
    expect(otherList.data).toEqual([]);

    const patched = await ts.api(`/apps/${app.id}`, {
      method: 'PATCH',
      key: ws.apiKey,
      json: { systemPrompt: 'New prompt', controls: { maxTokens: 100 } },
    });
    expect(patched.status).toBe(200);
    expect((await json(patched)).app).toMatchObject({
      name: 'Helper',
      systemPrompt: 'New prompt',
      controls: { temperature: 0.3, maxContextMessages: 5, maxTokens: 100 },
    });

    for (const [method, key] of [
      ['GET', other.apiKey],
      ['PATCH', other.apiKey],
      ['DELETE', other.apiKey],
    ] as const) {
      const res = await ts.api(`/apps/${app.id}`, {
        method,
        key,
        json: method === 'PATCH' ? { name: 'x' } : undefined,
      });
      expect(res.status).toBe(401);
      expect(await json(res)).toEqual({ error: 'Unauthorized or app not found' });
    }

    const del = await ts.api(`/apps/${app.id}`, { method: 'DELETE', key: ws.apiKey });
    expect(await json(del)).toEqual({ deleted: true, id: app.id });
    expect((await ts.api(`/apps/${app.id}`, { key: ws.apiKey })).status).toBe(401);
  });

  it('validates names and refuses missing keys', async () => {
    const res = await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: '  ' } });
    expect(res.status).toBe(400);
    expect((await json(res)).error).toBe('name is required');
    const noName = await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: {} });
    expect((await json(noName)).error).toBe('name is required');
    const bad = await ts.api('/apps', {
      method: 'POST',
      key: ws.apiKey,
      json: { name: 'a', controls: { temperature: 3 } },
    });
    expect((await json(bad)).error).toBe('controls.temperature must be between 0 and 2');
    const anon = await ts.api('/apps', { method: 'POST', json: { name: 'x' } });
    expect(anon.status).toBe(401);
    expect(await json(anon)).toEqual({ error: 'Invalid API key' });
  });

  it('does not expose managed agents (app_type agent) through /apps', async () => {
    const agentId = randomUUID();
    await ts.server.deps
      .em()
      .execute(`insert into apps (id, workspace_id, app_type, name) values (?, ?, 'agent', 'An agent')`, [
        agentId,
        ws.workspaceId,
      ]);
    const list = await json(await ts.api('/apps?limit=200', { key: ws.apiKey }));
    expect(list.data.map((a: { id: string }) => a.id)).not.toContain(agentId);
    for (const path of [
      `/apps/${agentId}`,
      `/apps/${agentId}/memory/threads`,
      `/apps/${agentId}/memory/status`,
    ]) {
      const res = await ts.api(path, { key: ws.apiKey });
      expect(res.status).toBe(401);
      expect(await json(res)).toEqual({ error: 'Unauthorized or app not found' });
    }
  });
});

describe('memory threads', () => {
  it('creates threads with defaults and documents the envelope', async () => {
    const res = await ts.api(`/apps/${appId}/memory/threads`, { method: 'POST', key: ws.apiKey, json: {} });
    expect(res.status).toBe(201);
    const { data } = await json(res);
    expect(Object.keys(data).sort()).toEqual(
      [
        'app_id',
        'created_at',
        'id',
        'message_count',
        'metadata',
        'session_id',
        'status',
        'title',
        'updated_at',
        'workspace_id',
      ].sort(),
    );
    expect(data).toMatchObject({
      app_id: appId,
      workspace_id: ws.workspaceId,
      session_id: null,
      title: 'New Thread',
      status: 'active',
      message_count: 0,
      metadata: {},
    });
    const got = await json(await ts.api(`/apps/${appId}/memory/threads/${data.id}`, { key: ws.apiKey }));
    expect(got.data).toEqual(data);
  });

  it('lists with limit default 20, capped at 100, status filter and {data, meta}', async () => {
    const app = await json(
      await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'Lister' } }),
    );
    const id = app.app.id;
    for (let i = 0; i < 23; i++) {
      await ts.api(`/apps/${id}/memory/threads`, {
        method: 'POST',
        key: ws.apiKey,
        json: { title: `T${i}`, metadata: { i } },
      });
    }
    const first = await json(await ts.api(`/apps/${id}/memory/threads`, { key: ws.apiKey }));
    expect(first.data).toHaveLength(20);
    expect(first.meta).toEqual({ limit: 20, offset: 0, total: 23 });
    const capped = await json(
      await ts.api(`/apps/${id}/memory/threads?limit=500&offset=20`, { key: ws.apiKey }),
    );
    expect(capped.meta).toEqual({ limit: 100, offset: 20, total: 23 });
    expect(capped.data).toHaveLength(3);

    const victim = first.data[0].id;
    const del = await ts.api(`/apps/${id}/memory/threads/${victim}`, { method: 'DELETE', key: ws.apiKey });
    expect(await json(del)).toEqual({ success: true, threadId: victim });
    const archived = await json(
      await ts.api(`/apps/${id}/memory/threads?status=archived`, { key: ws.apiKey }),
    );
    expect(archived.data.map((t: { id: string }) => t.id)).toEqual([victim]);
    expect(archived.data[0].status).toBe('archived');
    const active = await json(await ts.api(`/apps/${id}/memory/threads?status=active`, { key: ws.apiKey }));
    expect(active.meta.total).toBe(22);
    const bad = await ts.api(`/apps/${id}/memory/threads?status=deleted`, { key: ws.apiKey });
    expect(bad.status).toBe(400);
    expect((await json(bad)).error).toBe('Invalid status. Must be one of: active, archived, closed');
    // still readable after delete: archived, not removed
    expect((await ts.api(`/apps/${id}/memory/threads/${victim}`, { key: ws.apiKey })).status).toBe(200);
  });

  it('patches title and status; refuses other statuses with the spec message', async () => {
    const { data: t } = await json(
      await ts.api(`/apps/${appId}/memory/threads`, {
        method: 'POST',
        key: ws.apiKey,
        json: { title: 'Old' },
      }),
    );
    const closed = await json(
      await ts.api(`/apps/${appId}/memory/threads/${t.id}`, {
        method: 'PATCH',
        key: ws.apiKey,
        json: { status: 'closed', title: 'New' },
      }),
    );
    expect(closed.data).toMatchObject({ id: t.id, status: 'closed', title: 'New' });
    const bad = await ts.api(`/apps/${appId}/memory/threads/${t.id}`, {
      method: 'PATCH',
      key: ws.apiKey,
      json: { status: 'gone' },
    });
    expect(bad.status).toBe(400);
    expect((await json(bad)).error).toBe('Invalid status. Must be one of: active, archived, closed');
  });

  it('answers 404 Thread not found for unknown, malformed and foreign threads; 401 for foreign apps', async () => {
    const { data: t } = await json(
      await ts.api(`/apps/${appId}/memory/threads`, { method: 'POST', key: ws.apiKey, json: {} }),
    );
    const otherApp = await json(
      await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'Other app' } }),
    );
    for (const path of [
      `/apps/${appId}/memory/threads/${randomUUID()}`,
      `/apps/${appId}/memory/threads/not-a-uuid`,
      `/apps/${otherApp.app.id}/memory/threads/${t.id}`,
      `/apps/${appId}/memory/threads/${randomUUID()}/messages`,
    ]) {
      const res = await ts.api(path, { key: ws.apiKey });
      expect(res.status).toBe(404);
      expect(await json(res)).toEqual({ error: 'Thread not found' });
    }
    for (const [method, path] of [
      ['GET', `/apps/${appId}/memory/threads`],
      ['GET', `/apps/${appId}/memory/threads/${t.id}`],
      ['DELETE', `/apps/${appId}/memory/threads/${t.id}`],
      ['GET', `/apps/${appId}/memory/status`],
      ['GET', `/apps/${randomUUID()}/memory/threads`],
      ['GET', `/apps/%2e%2e%2f${appId}/memory/threads`],
      ['POST', `/apps/${appId}/memory/save-messages`],
    ] as const) {
      const res = await ts.api(path, {
        method,
        key: other.apiKey,
        json: method === 'POST' ? { threadId: t.id, messages: [{ role: 'user', content: 'x' }] } : undefined,
      });
      expect(res.status, `${method} ${path}`).toBe(401);
      expect(await json(res)).toEqual({ error: 'Unauthorized or app not found' });
    }
    const foreign = await ts.api(`/apps/${appId}/memory/threads/${t.id}`, { key: other.apiKey });
    expect(foreign.status).toBe(401);
    // the foreign caller changed nothing
    const still = await json(await ts.api(`/apps/${appId}/memory/threads/${t.id}`, { key: ws.apiKey }));
    expect(still.data).toMatchObject({ status: 'active', message_count: 0 });
  });
});

describe('save-messages and messages', () => {
  it('validates with the spec messages', async () => {
    const { data: t } = await json(
      await ts.api(`/apps/${appId}/memory/threads`, { method: 'POST', key: ws.apiKey, json: {} }),
    );
    const cases: [unknown, string][] = [
      [{ messages: [{ role: 'user', content: 'x' }] }, 'threadId is required'],
      [{ threadId: '', messages: [{ role: 'user', content: 'x' }] }, 'threadId is required'],
      [{ threadId: t.id }, 'messages must be a non-empty array'],
      [{ threadId: t.id, messages: [] }, 'messages must be a non-empty array'],
      [{ threadId: t.id, messages: 'hi' }, 'messages must be a non-empty array'],
      [
        { threadId: t.id, messages: Array.from({ length: 101 }, () => ({ role: 'user', content: 'x' })) },
        'Maximum 100 messages per request',
      ],
      [
        { threadId: t.id, messages: [{ role: 'system', content: 'x' }] },
        'role must be one of: user, assistant',
      ],
      [{ threadId: t.id, messages: [{ role: 'user', content: '' }] }, 'content is required'],
    ];
    for (const [body, error] of cases) {
      const res = await ts.api(`/apps/${appId}/memory/save-messages`, {
        method: 'POST',
        key: ws.apiKey,
        json: body,
      });
      expect(res.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect((await json(res)).error).toBe(error);
    }
    const unknown = await ts.api(`/apps/${appId}/memory/save-messages`, {
      method: 'POST',
      key: ws.apiKey,
      json: { threadId: randomUUID(), messages: [{ role: 'user', content: 'x' }] },
    });
    expect(unknown.status).toBe(404);
    expect(await json(unknown)).toEqual({ error: 'Thread not found' });
    const status = await json(await ts.api(`/apps/${appId}/memory/threads/${t.id}`, { key: ws.apiKey }));
    expect(status.data.message_count).toBe(0);
  });

  it('saves 100 messages in order and pages them ascending (default 50, capped at 200)', async () => {
    const { data: t } = await json(
      await ts.api(`/apps/${appId}/memory/threads`, { method: 'POST', key: ws.apiKey, json: {} }),
    );
    const messages = Array.from({ length: 100 }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content: `m${i}`,
      ...(i === 0 ? { requestId: 'r1', turnId: 't1', metadata: { source: 'import' } } : {}),
    }));
    const res = await ts.api(`/apps/${appId}/memory/save-messages`, {
      method: 'POST',
      key: ws.apiKey,
      json: { threadId: t.id, messages },
    });
    expect(res.status).toBe(201);
    expect(await json(res)).toEqual({ saved: 100, threadId: t.id });
    await ts.api(`/apps/${appId}/memory/save-messages`, {
      method: 'POST',
      key: ws.apiKey,
      json: { threadId: t.id, messages: [{ role: 'user', content: 'last' }] },
    });

    const page = await json(
      await ts.api(`/apps/${appId}/memory/threads/${t.id}/messages`, { key: ws.apiKey }),
    );
    expect(page.meta).toEqual({ limit: 50, offset: 0, total: 101 });
    expect(page.data.map((m: { sequence_number: number }) => m.sequence_number)).toEqual(
      Array.from({ length: 50 }, (_, i) => i + 1),
    );
    expect(page.data[0]).toEqual({
      id: expect.any(String),
      workspace_id: ws.workspaceId,
      app_id: appId,
      thread_id: t.id,
      role: 'user',
      content: 'm0',
      sequence_number: 1,
      request_id: 'r1',
      turn_id: 't1',
      provider_status: 'saved',
      error_code: null,
      latency_ms: 0,
      input_tokens: 0,
      output_tokens: 0,
      cost_usd: 0,
      rag_sources: [],
      metadata: { source: 'import' },
      created_at: expect.any(String),
    });
    const all = await json(
      await ts.api(`/apps/${appId}/memory/threads/${t.id}/messages?limit=1000`, { key: ws.apiKey }),
    );
    expect(all.meta.limit).toBe(200);
    expect(all.data.map((m: { content: string }) => m.content)).toEqual([
      ...messages.map((m) => m.content),
      'last',
    ]);
    const tail = await json(
      await ts.api(`/apps/${appId}/memory/threads/${t.id}/messages?offset=100`, { key: ws.apiKey }),
    );
    expect(tail.data.map((m: { sequence_number: number }) => m.sequence_number)).toEqual([101]);

    const thread = await json(await ts.api(`/apps/${appId}/memory/threads/${t.id}`, { key: ws.apiKey }));
    expect(thread.data.message_count).toBe(101);
  });

  it('keeps sequence numbers gapless and ordered under concurrent saves to one thread', async () => {
    const { data: t } = await json(
      await ts.api(`/apps/${appId}/memory/threads`, { method: 'POST', key: ws.apiKey, json: {} }),
    );
    const writers = 12;
    const perBatch = 5;
    const results = await Promise.all(
      Array.from({ length: writers }, (_, w) =>
        ts.api(`/apps/${appId}/memory/save-messages`, {
          method: 'POST',
          key: ws.apiKey,
          json: {
            threadId: t.id,
            messages: Array.from({ length: perBatch }, (_, i) => ({ role: 'user', content: `w${w}-${i}` })),
          },
        }),
      ),
    );
    expect(results.map((r) => r.status)).toEqual(Array(writers).fill(201));
    const all = await json(
      await ts.api(`/apps/${appId}/memory/threads/${t.id}/messages?limit=200`, { key: ws.apiKey }),
    );
    const seqs = all.data.map((m: { sequence_number: number }) => m.sequence_number);
    expect(seqs).toEqual(Array.from({ length: writers * perBatch }, (_, i) => i + 1));
    // each batch is contiguous and in its own order
    const contents: string[] = all.data.map((m: { content: string }) => m.content);
    for (let w = 0; w < writers; w++) {
      const start = contents.indexOf(`w${w}-0`);
      expect(contents.slice(start, start + perBatch)).toEqual(
        Array.from({ length: perBatch }, (_, i) => `w${w}-${i}`),
      );
    }
  });

  it('reports memory status counts', async () => {
    const app = await json(
      await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'Counter' } }),
    );
    const id = app.app.id;
    const empty = await json(await ts.api(`/apps/${id}/memory/status`, { key: ws.apiKey }));
    expect(empty).toEqual({ appId: id, threadCount: 0, activeThreadCount: 0, messageCount: 0 });
    const a = await json(
      await ts.api(`/apps/${id}/memory/threads`, { method: 'POST', key: ws.apiKey, json: {} }),
    );
    const b = await json(
      await ts.api(`/apps/${id}/memory/threads`, { method: 'POST', key: ws.apiKey, json: {} }),
    );
    await ts.api(`/apps/${id}/memory/save-messages`, {
      method: 'POST',
      key: ws.apiKey,
      json: {
        threadId: a.data.id,
        messages: [
          { role: 'user', content: '1' },
          { role: 'assistant', content: '2' },
        ],
      },
    });
    await ts.api(`/apps/${id}/memory/save-messages`, {
      method: 'POST',
      key: ws.apiKey,
      json: { threadId: b.data.id, messages: [{ role: 'user', content: '3' }] },
    });
    await ts.api(`/apps/${id}/memory/threads/${b.data.id}`, { method: 'DELETE', key: ws.apiKey });
    const status = await json(await ts.api(`/apps/${id}/memory/status`, { key: ws.apiKey }));
    expect(status).toEqual({ appId: id, threadCount: 2, activeThreadCount: 1, messageCount: 3 });
  });
});
