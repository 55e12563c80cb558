import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestSession,
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestSession,
  type TestWorkspace,
} from '../../test/harness.js';
import { WorkspacesService } from '../workspaces/service.js';

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let other: TestWorkspace;
let secondKey: { key: string; id: string };
let owner: TestSession;

const chat = (key: string, content = 'hello') =>
  ts.api('/chat', { method: 'POST', key, json: { messages: [{ role: 'user', content }] } });

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts, { creditsUsd: '2.5', monthlyTokenQuota: 100_000 });
  other = await createTestWorkspace(ts);
  const created = await new WorkspacesService(ts.server.deps.em()).createApiKey({
    workspaceId: ws.workspaceId,
    name: 'backend',
  });
  secondKey = { key: created.key, id: created.apiKey.id };
  owner = await createTestSession(ts, ws);
  ts.fake.script(
    { text: 'one', usage: { prompt_tokens: 10, completion_tokens: 5 } },
    { text: 'two', usage: { prompt_tokens: 20, completion_tokens: 7 } },
    { error: { status: 500, message: 'upstream broke' } },
    { text: 'three', usage: { prompt_tokens: 30, completion_tokens: 9 } },
  );
  for (const key of [ws.apiKey, ws.apiKey, secondKey.key, secondKey.key]) await (await chat(key)).text();
  // Another workspace's usage never shows.
  ts.fake.script({ text: 'x', usage: { prompt_tokens: 1000, completion_tokens: 1000 } });
  await (await chat(other.apiKey)).text();
});
afterAll(() => ts?.close());

async function usage(path: string, init: { key?: string; cookie?: string } = {}) {
  const headers: Record<string, string> = {};
  if (init.key) headers.authorization = `Bearer ${init.key}`;
  if (init.cookie) headers.cookie = init.cookie;
  const res = await fetch(`${ts.url}${path}`, { headers });
  return { status: res.status, body: (await res.json()) as any };
}

describe('GET /workspaces/{workspaceId}/insights/usage', () => {
  it('sums the window by day, model and key, lists failed calls, with balance and quota', async () => {
    // Records are written after each stream ends: wait until the four are in.
    await expect
      .poll(
        async () =>
          (await usage(`/api/v1/workspaces/${ws.workspaceId}/insights/usage`, { key: ws.apiKey })).body.totals
            ?.requests,
      )
      .toBe(4);
    const { status, body } = await usage(`/api/v1/workspaces/${ws.workspaceId}/insights/usage?days=7`, {
      key: ws.apiKey,
    });
    expect(status).toBe(200);
    expect(body.totals).toMatchObject({ requests: 4, inputTokens: 60, outputTokens: 21, errors: 1 });
    // fake-chat: $1 / $2 per million input / output tokens.
    expect(body.totals.costUsd).toBeCloseTo((60 * 1 + 21 * 2) / 1_000_000, 9);
    expect(body.byDay).toHaveLength(7);
    const today = new Date().toISOString().slice(0, 10);
    expect(body.byDay.at(-1)).toMatchObject({ date: today, requests: 4, inputTokens: 60 });
    expect(body.byDay.slice(0, 6).every((d: { requests: number }) => d.requests === 0)).toBe(true);
    expect(body.byModel).toEqual([
      expect.objectContaining({ model: 'fake-chat', requests: 4, inputTokens: 60, outputTokens: 21 }),
    ]);
    const byKey = Object.fromEntries(body.byApiKey.map((k: { name: string }) => [k.name, k]));
    expect(byKey.test).toMatchObject({ apiKeyId: ws.keyId, requests: 2, inputTokens: 30, outputTokens: 12 });
    expect(byKey.backend).toMatchObject({
      apiKeyId: secondKey.id,
      requests: 2,
      inputTokens: 30,
      outputTokens: 9,
    });
    expect(byKey.backend.prefix).toMatch(/^svc_ai_/);
    expect(body.recentErrors).toEqual([
      expect.objectContaining({
        endpoint: '/chat',
        model: 'fake-chat',
        status: 'error',
        apiKeyId: secondKey.id,
      }),
    ]);
    expect(body.credits.balanceUsd).toBe(2.5);
    expect(body.tokenQuota).toMatchObject({ quota: 100_000, used: 81 });
    expect(Date.parse(body.tokenQuota.resetsAt)).toBeGreaterThan(Date.now());
  });

  it('answers the signed-in person on the console mount; refuses other workspaces and bad windows', async () => {
    const viaSession = await usage(`/console-api/v1/workspaces/${ws.workspaceId}/insights/usage`, {
      cookie: owner.cookie,
    });
    expect(viaSession.status).toBe(200);
    expect(viaSession.body.totals.requests).toBe(4);
    expect(await usage(`/api/v1/workspaces/${other.workspaceId}/insights/usage`, { key: ws.apiKey })).toEqual(
      {
        status: 401,
        body: { error: 'Unauthorized' },
      },
    );
    for (const days of ['0', '91', '1.5', 'x']) {
      const r = await usage(`/api/v1/workspaces/${ws.workspaceId}/insights/usage?days=${days}`, {
        key: ws.apiKey,
      });
      expect(r.status, days).toBe(400);
      expect(JSON.stringify(r.body), days).toContain('days must be an integer from 1 to 90');
    }
    const empty = await usage(`/api/v1/workspaces/${other.workspaceId}/insights/usage?days=1`, {
      key: other.apiKey,
    });
    expect(empty.body.totals.requests).toBe(1);
    expect(empty.body.byDay).toHaveLength(1);
  });

  it('GET …/insights/usage/requests/{requestId}: the records of one request, in its workspace only', async () => {
    ts.fake.script({ text: 'counted', usage: { prompt_tokens: 11, completion_tokens: 3 } });
    const res = await chat(ws.apiKey);
    await res.text();
    const requestId = res.headers.get('x-request-id') ?? '';
    const path = `/workspaces/${ws.workspaceId}/insights/usage/requests/${encodeURIComponent(requestId)}`;
    await expect
      .poll(async () => (await usage(`/api/v1${path}`, { key: ws.apiKey })).body.data.length)
      .toBe(1);
    const { body } = await usage(`/api/v1${path}`, { key: ws.apiKey });
    expect(body.data[0]).toMatchObject({
      endpoint: '/chat',
      model: 'fake-chat',
      inputTokens: 11,
      outputTokens: 3,
      costUsd: (11 + 3 * 2) / 1_000_000,
      status: 'success',
      apiKeyId: ws.keyId,
    });
    // Another workspace's request id finds nothing; another workspace's path is refused.
    const otherPath = `/workspaces/${other.workspaceId}/insights/usage/requests/${encodeURIComponent(requestId)}`;
    expect((await usage(`/api/v1${otherPath}`, { key: other.apiKey })).body).toEqual({ data: [] });
    expect((await usage(`/api/v1${otherPath}`, { key: ws.apiKey })).status).toBe(401);
  });
});
