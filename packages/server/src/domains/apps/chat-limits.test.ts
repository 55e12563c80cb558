import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '../../test/harness.js';

let ts: TestServer & { fake: FakeOpenAI };

const json = async <T = any>(res: Response): Promise<T> => (await res.json()) as T;

async function workspaceWithApp(creditsUsd: string) {
  const ws = await createTestWorkspace(ts, { creditsUsd });
  const app = await json(await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'Limits' } }));
  return { ...ws, appId: app.app.id as string };
}

const events = (text: string) =>
  text
    .split('\n')
    .filter((l) => l.startsWith('data: '))
    .map((l) => JSON.parse(l.slice(6)));

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    env: { METERING_CREDIT_CHECK_TOKENS: '2', METERING_DEFAULT_OUTPUT_TOKENS: '2', RATE_LIMIT_APP_CHAT: '3' },
  });
});
afterAll(() => ts?.close());

describe('app chat limits', () => {
  it('runs out of credits mid-stream: error event INSUFFICIENT_CREDITS, user message kept', async () => {
    // 40 micro-dollars: the prompt (~21 tokens, 1 each) and the expected 2-token reply are held;
    // output costs 2 per token, re-checked every 2 tokens; the reply may run one hold (25)
    // below zero, then the stream ends.
    const w = await workspaceWithApp('0.00004');
    ts.fake.script({ text: 'word '.repeat(100), chunkSize: 4, usage: false });
    const res = await ts.api(`/apps/${w.appId}/chat/message/stream`, {
      method: 'POST',
      key: w.apiKey,
      json: { message: 'Talk a lot', role: 'student' },
    });
    expect(res.status).toBe(200);
    const evs = events(await res.text());
    const last = evs.at(-1);
    expect(last).toEqual({ type: 'error', code: 'INSUFFICIENT_CREDITS', message: 'Insufficient credits' });
    const tokens = evs.filter((e) => e.type === 'token');
    expect(tokens.length).toBeGreaterThan(0);
    expect(tokens.length).toBeLessThan(100);
    const threads = await json(await ts.api(`/apps/${w.appId}/memory/threads`, { key: w.apiKey }));
    const msgs = await json(
      await ts.api(`/apps/${w.appId}/memory/threads/${threads.data[0].id}/messages`, { key: w.apiKey }),
    );
    expect(
      msgs.data.map((m: { role: string; provider_status: string; error_code: string }) => [
        m.role,
        m.provider_status,
        m.error_code,
      ]),
    ).toEqual([['user', 'error', 'INSUFFICIENT_CREDITS']]);
  });

  it('a caller that disconnects aborts the upstream call and the turn is marked aborted', async () => {
    const w = await workspaceWithApp('5');
    ts.fake.script({ text: 'slow '.repeat(200), chunkSize: 5, paceMs: 20 });
    const controller = new AbortController();
    const res = await ts.api(`/apps/${w.appId}/chat/message/stream`, {
      method: 'POST',
      key: w.apiKey,
      json: { message: 'Start and leave', role: 'student' },
      signal: controller.signal,
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toContain('"type":"token"');
    controller.abort();
    await reader.cancel().catch(() => {});
    const upstream = ts.fake.requests.at(-1);
    await vi.waitFor(() => expect(upstream?.aborted).toBe(true), { timeout: 10_000 });
    const threads = await json(await ts.api(`/apps/${w.appId}/memory/threads`, { key: w.apiKey }));
    const threadId = threads.data[0].id;
    await vi.waitFor(
      async () => {
        const msgs = await json(
          await ts.api(`/apps/${w.appId}/memory/threads/${threadId}/messages`, { key: w.apiKey }),
        );
        expect(
          msgs.data.map((m: { role: string; provider_status: string }) => [m.role, m.provider_status]),
        ).toEqual([['user', 'aborted']]);
      },
      { timeout: 10_000 },
    );
  });

  it('rate limits app chat per workspace with 429 Rate limit exceeded', async () => {
    const w = await workspaceWithApp('5');
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await ts.api(`/apps/${w.appId}/chat/message`, {
        method: 'POST',
        key: w.apiKey,
        json: { message: `m${i}`, role: 'student' },
      });
      statuses.push(res.status);
      if (res.status === 429) {
        expect((await json(res)).error).toBe('Rate limit exceeded');
        expect(res.headers.get('retry-after')).toMatch(/^\d+$/);
      } else {
        expect(res.headers.get('ratelimit-limit') ?? res.headers.get('ratelimit')).toBeTruthy();
        await res.arrayBuffer();
      }
    }
    expect(statuses).toEqual([200, 200, 200, 429]);
  });
});
