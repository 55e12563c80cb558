import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAgentWithSession, sendMessage } from '../domains/agents/test-helpers.js';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '../test/harness.js';
import { RATE_LIMIT_SHARDS, SHARDED_RATE_LIMIT_MIN } from './rate-limit.js';

/**
 * Rate limits of at least `SHARDED_RATE_LIMIT_MIN` per window are counted over
 * `RATE_LIMIT_SHARDS` rows by the admission statements of `/chat`, app chat and agent turns
 * (decision 0031); below it, one row, exactly (`chat.test.ts`, `runs.test.ts`,
 * `chat-limits.test.ts`).
 */
const LIMIT = SHARDED_RATE_LIMIT_MIN;
let ts: TestServer & { fake: FakeOpenAI };

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    env: {
      RATE_LIMIT_CHAT: String(LIMIT),
      RATE_LIMIT_APP_CHAT: String(LIMIT),
      RATE_LIMIT_AGENT_MESSAGE: String(LIMIT),
      RATE_LIMIT_SESSION_CREATE: '100000',
      // A window far longer than the test: no boundary falls between its requests.
      RATE_LIMIT_WINDOW_SECONDS: '100000000',
    },
  });
});
afterAll(async () => {
  await ts?.close();
});

const chat = (key: string) =>
  ts.api('/chat', { method: 'POST', key, json: { messages: [{ role: 'user', content: 'hi' }] } });
const appChat = (key: string, appId: string) =>
  ts.api(`/apps/${appId}/chat/message/stream`, {
    method: 'POST',
    key,
    json: { message: 'hi', role: 'student' },
  });

async function windowRows(bucket: string, workspaceId: string) {
  return ts.server.deps
    .em()
    .execute<{ key: string; hits: number }[]>(
      'select key, hits from rate_limit_windows where key like ? order by key',
      [`${bucket}:${workspaceId}%`],
    );
}

/** Puts the bucket's window at `hits` (on one shard row), as if that many requests came before. */
async function fillWindow(bucket: string, workspaceId: string, hits: number) {
  const em = ts.server.deps.em();
  await em.execute('delete from rate_limit_windows where key like ?', [`${bucket}:${workspaceId}%`]);
  await em.execute(
    `insert into rate_limit_windows (key, window_start, hits)
     values (?, to_timestamp(floor(extract(epoch from now()) / ?) * ?), ?)`,
    [`${bucket}:${workspaceId}:s3`, 100000000, 100000000, hits],
  );
}

/** A burst's answers: all 200 (streams read), each counted once, over more than one row. */
async function expectCountedOverRows(bucket: string, workspaceId: string, burst: Response[]) {
  expect(burst.map((r) => r.status)).toEqual(Array(burst.length).fill(200));
  await Promise.all(burst.map((r) => r.text()));
  const rows = await windowRows(bucket, workspaceId);
  expect(rows.reduce((n, r) => n + Number(r.hits), 0)).toBe(burst.length);
  expect(rows.length).toBeGreaterThan(1);
  expect(rows.length).toBeLessThanOrEqual(RATE_LIMIT_SHARDS);
  return rows;
}

/** With the window one unit short, that unit passes (`Remaining: 0`) and the next is 429. */
async function expectLastUnitThen429(send: () => Promise<Response>) {
  const last = await send();
  expect(last.status).toBe(200);
  expect(last.headers.get('ratelimit-remaining')).toBe('0');
  await last.text();
  const over = await send();
  expect(over.status).toBe(429);
  const body = (await over.json()) as { error: string; code?: string };
  expect(body.error).toBe('Rate limit exceeded');
  return body;
}

const runCount = async (sessionId: string) =>
  Number(
    (
      await ts.server.deps
        .em()
        .execute<{ n: string }[]>('select count(*) as n from runs where session_id = ?', [sessionId])
    )[0]?.n,
  );

describe('rate limits counted over several rows (limit ≥ SHARDED_RATE_LIMIT_MIN)', () => {
  it('a burst of 120 /chat requests: every one counted once, over several rows, headers from the total', async () => {
    const w = await createTestWorkspace(ts);
    const res = await Promise.all(Array.from({ length: 120 }, () => chat(w.apiKey)));
    const remaining = res.map((r) => Number(r.headers.get('ratelimit-remaining')));
    const rows = await expectCountedOverRows('chat', w.workspaceId, res);
    // Each saw at least its own unit and at most all of them.
    for (const r of remaining) expect(r).toBeGreaterThanOrEqual(LIMIT - 120);
    for (const r of remaining) expect(r).toBeLessThanOrEqual(LIMIT - 1);
    for (const r of rows)
      expect(r.key).toMatch(new RegExp(`^chat:${w.workspaceId}:s[0-${RATE_LIMIT_SHARDS - 1}]$`));
    // After the burst, a request sees the whole count.
    const after = await chat(w.apiKey);
    expect(after.headers.get('ratelimit-remaining')).toBe(String(LIMIT - 121));
    await after.text();
  });

  it('/chat: the last unit of the window passes, the next is 429 Rate limit exceeded', async () => {
    const w = await createTestWorkspace(ts);
    await fillWindow('chat', w.workspaceId, LIMIT - 1);
    expect(await expectLastUnitThen429(() => chat(w.apiKey))).toEqual({
      error: 'Rate limit exceeded',
      code: 'RATE_LIMITED',
    });
  });

  it('agent turns: counted over several rows; the last unit passes, the next is 429 and starts no run', async () => {
    const w = await createTestWorkspace(ts, { creditsUsd: '10' });
    const sessions = await Promise.all(
      Array.from({ length: 30 }, () => createAgentWithSession(ts, w.apiKey, { name: 'Sharded' })),
    );
    const turns = await Promise.all(
      sessions.map((s) => sendMessage(ts, w.apiKey, s.sessionId, { message: 'hi' })),
    );
    await expectCountedOverRows('agent_message', w.workspaceId, turns);

    await fillWindow('agent_message', w.workspaceId, LIMIT - 1);
    const sessionId = sessions[0]?.sessionId as string;
    const last = await sendMessage(ts, w.apiKey, sessionId, { message: 'last' });
    expect(last.status).toBe(200);
    expect(last.headers.get('ratelimit-remaining')).toBe('0');
    await last.text();
    // A turn through the general path (`interrupt`) counts in the same window: the one after
    // it is over the limit.
    await fillWindow('agent_message', w.workspaceId, LIMIT - 2);
    const general = await sendMessage(ts, w.apiKey, sessionId, {
      message: 'general',
      concurrency: 'interrupt',
    });
    expect(general.status).toBe(200);
    expect(general.headers.get('ratelimit-remaining')).toBe('1');
    await general.text();
    const keyTurn = await sendMessage(ts, w.apiKey, sessionId, { message: 'key turn' });
    expect(keyTurn.status).toBe(200);
    expect(keyTurn.headers.get('ratelimit-remaining')).toBe('0');
    await keyTurn.text();
    const runsBefore = await runCount(sessionId);
    const over = await sendMessage(ts, w.apiKey, sessionId, { message: 'over' });
    expect(over.status).toBe(429);
    expect(((await over.json()) as { error: string }).error).toBe('Rate limit exceeded');
    expect(await runCount(sessionId)).toBe(runsBefore);
  });

  it('app chat: counted over several rows; the last unit passes, the next is 429', async () => {
    const w = await createTestWorkspace(ts, { creditsUsd: '10' });
    const app = (await (
      await ts.api('/apps', { method: 'POST', key: w.apiKey, json: { name: 'Sharded' } })
    ).json()) as {
      app: { id: string };
    };
    const res = await Promise.all(Array.from({ length: 30 }, () => appChat(w.apiKey, app.app.id)));
    await expectCountedOverRows('app_chat', w.workspaceId, res);

    await fillWindow('app_chat', w.workspaceId, LIMIT - 1);
    await expectLastUnitThen429(() => appChat(w.apiKey, app.app.id));
  });
});
