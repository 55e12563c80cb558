import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { SqlExecutor } from '../../db/sql.js';
import type { AppError } from '../../errors/index.js';
import {
  createTestWorkspace,
  creditBalance,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { AppChatService, type ChatDeps, estimateUsage } from './chat.js';
import type { ChatMessageInput } from './schema.js';

/**
 * App chat's statements (issue 20, decisions 0027 and 0032): once an app was seen by the process, the
 * credit hold is taken by the admission statement (one statement before the model), and the
 * end of a turn writes the memory and the settlement in one statement.
 */
let ts: TestServer & { fake: FakeOpenAI };

const ENDPOINT = '/apps/{appId}/chat/message/stream';
const json = async <T = any>(res: Response): Promise<T> => (await res.json()) as T;
const sql = <T>(q: string, params: unknown[] = []) => ts.server.deps.em().execute<T[]>(q, params);

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    env: {
      RATE_LIMIT_APP_CHAT: '4',
      // A window far longer than the test (no boundary between its requests).
      RATE_LIMIT_WINDOW_SECONDS: '100000000',
      // A token window longer than any test: every reply's text after its first piece waits for
      // the end of the stream (or a failure), so what a failure does with it shows every run.
      APP_CHAT_STREAM_COALESCE_MS: '60000',
    },
  });
});
afterAll(() => ts?.close());

/** App chat's service on the server's pool, counting the statements it runs. */
function counted(requestId = `req_${randomUUID()}`) {
  const n = { statements: 0 };
  const d = ts.server.deps;
  const db: SqlExecutor = {
    execute: <T>(q: string, params?: unknown[]) => {
      n.statements++;
      return d.db.sql.execute<T>(q, params);
    },
  };
  const deps: ChatDeps = { llm: d.llm, models: d.models, metering: d.metering.using(db), db, log: d.log };
  return { n, service: new AppChatService(deps, requestId), metering: deps.metering, requestId };
}

async function createApp(ws: TestWorkspace, body: Record<string, unknown> = {}): Promise<string> {
  const res = await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'Stmts', ...body } });
  return (await json(res)).app.id as string;
}

/** A new workspace with $10 and an app, the fake's next reply scripted, one streamed turn. */
async function streamTurn(message: string, reply: { text: string; prompt: number; completion: number }) {
  const ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  const appId = await createApp(ws);
  ts.fake.script({
    text: reply.text,
    usage: { prompt_tokens: reply.prompt, completion_tokens: reply.completion },
  });
  const res = await ts.api(`/apps/${appId}/chat/message/stream`, {
    method: 'POST',
    key: ws.apiKey,
    json: { message, role: 'student' },
  });
  expect(res.status).toBe(200);
  return { ws, appId, res };
}

const input = (appId: string, extra: Partial<ChatMessageInput> = {}): ChatMessageInput => ({
  appId,
  message: 'Explain fractions, please.',
  role: 'student',
  ...extra,
});

/** One turn through the service: statements before the model, statements in all, its events. */
async function turn(ws: TestWorkspace, appId: string, extra: Partial<ChatMessageInput> = {}) {
  const c = counted();
  const prepared = await c.service.prepare({ apiKey: ws.apiKey }, appId, input(appId, extra), ENDPOINT);
  const before = c.n.statements;
  const expectedHold = c.metering.expectedHoldMicros(
    prepared.model,
    ENDPOINT,
    estimateUsage(prepared.messages, '').inputTokens,
  );
  const heldMicros = (prepared.meter as unknown as { heldMicros: number }).heldMicros;
  const events = [];
  for await (const ev of c.service.run(prepared)) events.push(ev);
  return { before, total: c.n.statements, heldMicros, expectedHold, events, prepared };
}

async function refusal(ws: TestWorkspace, appId: string, extra: Partial<ChatMessageInput> = {}) {
  const c = counted();
  const err = (await c.service.prepare({ apiKey: ws.apiKey }, appId, input(appId, extra), ENDPOINT).then(
    () => undefined,
    (e: unknown) => e,
  )) as AppError | undefined;
  return { status: err?.status, message: err?.message, statements: c.n.statements };
}

describe('app chat statements', () => {
  it('once the app was seen: one statement before the model (the hold in the admission), one after', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '10' });
    const appId = await createApp(ws, { systemPrompt: 'You teach maths.' });
    ts.fake.script({ text: 'A fraction is a part of a whole.' });
    // First turn of the app in this process: the hold is a statement of its own.
    const first = await turn(ws, appId);
    expect(first.events.at(-1)?.type).toBe('done');
    expect([first.before, first.total]).toEqual([2, 3]);
    const threadId = first.prepared.threadId;

    // History longer than a history item's limit (8000 characters, cut with an ellipsis): the
    // statement counts it as the prompt does.
    const seeded = await ts.api(`/apps/${appId}/memory/save-messages`, {
      method: 'POST',
      key: ws.apiKey,
      json: { threadId, messages: [{ role: 'assistant', content: `${'long '.repeat(2000)}end` }] },
    });
    expect(seeded.status).toBeLessThan(300);
    ts.fake.script({ text: 'Halves and quarters.' });
    const second = await turn(ws, appId, { threadId });
    expect(second.events.at(-1)?.type).toBe('done');
    expect([second.before, second.total]).toEqual([1, 2]);
    expect(second.prepared.messages.length).toBe(5); // system, 3 of the thread, the message
    expect(second.heldMicros).toBe(second.expectedHold);

    // The app changes (its prompt): the admission sees it, the hold is its own statement again,
    // sized for the new prompt; the next turn is back to one statement.
    const patched = await ts.api(`/apps/${appId}`, {
      method: 'PATCH',
      key: ws.apiKey,
      json: { systemPrompt: `You teach maths. ${'Be thorough. '.repeat(200)}` },
    });
    expect(patched.status).toBe(200);
    ts.fake.script({ text: 'Thoroughly: halves.' });
    const third = await turn(ws, appId, { threadId });
    expect([third.before, third.total]).toEqual([2, 3]);
    expect(third.heldMicros).toBe(third.expectedHold);
    ts.fake.script({ text: 'And thirds.' });
    const fourth = await turn(ws, appId, { threadId });
    expect([fourth.before, fourth.total]).toEqual([1, 2]);
    expect(fourth.heldMicros).toBe(fourth.expectedHold);

    // Memory and money: every turn stored, settled, recorded; no hold left.
    const msgs = await sql<{ sequence_number: number; provider_status: string }>(
      'select sequence_number, provider_status from app_thread_messages where thread_id = ? order by sequence_number',
      [threadId],
    );
    expect(msgs.map((m) => m.sequence_number)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const recs = await sql<{ cost_micros: string }>(
      'select cost_micros from usage_records where workspace_id = ?',
      [ws.workspaceId],
    );
    expect(recs).toHaveLength(4);
    const used = recs.reduce((s, r) => s + Number(r.cost_micros), 0);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(10_000_000 - used);
    expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toEqual([]);
  });

  it('a hold refused by the admission: 402 in one statement, after 400, 404 and 429; nothing held, written or sent', async () => {
    const poor = await createTestWorkspace(ts);
    const appId = await createApp(poor);
    const calls = ts.fake.requests.length;
    // A request that reaches the app (unknown thread: 404) is enough for the process to know it.
    expect((await refusal(poor, appId, { threadId: randomUUID() })).status).toBe(404);
    expect(await refusal(poor, appId)).toEqual({
      status: 402,
      message: 'Insufficient credits',
      statements: 1,
    });
    const c = counted();
    const invalid = await c.service
      .prepare({ apiKey: poor.apiKey }, appId, undefined, ENDPOINT, { status: 400 } as AppError)
      .catch((e: unknown) => e);
    expect(invalid).toEqual({ status: 400 });
    expect((await refusal(poor, appId, { threadId: randomUUID() })).status).toBe(404);
    expect((await refusal(poor, appId)).status).toBe(402);
    // Four units of the rate limit taken (the 400 takes none): the fifth request is a 429.
    expect(await refusal(poor, appId)).toMatchObject({ status: 429, statements: 1 });

    expect(ts.fake.requests.length).toBe(calls);
    expect(await sql('select 1 from credit_holds where workspace_id = ?', [poor.workspaceId])).toEqual([]);
    expect(
      await sql("select 1 from credit_ledger where workspace_id = ? and kind <> 'grant'", [poor.workspaceId]),
    ).toEqual([]);
    expect(await sql('select 1 from app_threads where workspace_id = ?', [poor.workspaceId])).toEqual([]);
    expect(await sql('select 1 from usage_records where workspace_id = ?', [poor.workspaceId])).toEqual([]);
    expect(await creditBalance(ts, poor.workspaceId)).toBe(0);
  });

  it('the end of a turn is one transaction: memory that cannot be written takes its settlement with it; the hold is then settled alone, once', async () => {
    // PostgreSQL stores no NUL character: the memory part of the statement fails.
    const { ws, appId, res } = await streamTurn('A NUL \u0000 inside', {
      text: 'Fine.',
      prompt: 50,
      completion: 2,
    });
    const events = (await res.text())
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => JSON.parse(l.slice(6)));
    expect(
      events
        .filter((e) => e.type === 'token')
        .map((e) => e.content)
        .join(''),
    ).toBe('Fine.');
    expect(events.at(-1)?.type).toBe('error');
    expect(events.some((e) => e.type === 'done')).toBe(false);
    const requestId = res.headers.get('x-request-id');
    expect(await sql('select 1 from app_threads where app_id = ?', [appId])).toEqual([]);
    expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toEqual([]);
    // Settled on its own after the failed statement: charged what the model produced, once.
    const recs = await sql<{ cost_micros: string; provider_status: string }>(
      'select cost_micros, provider_status from usage_records where request_id = ?',
      [requestId],
    );
    expect(recs.map((r) => [r.provider_status, Number(r.cost_micros)])).toEqual([['success', 54]]);
    const ledger = await sql<{ kind: string; amount_micros: string }>(
      "select kind, amount_micros from credit_ledger where workspace_id = ? and kind <> 'grant'",
      [ws.workspaceId],
    );
    expect(ledger).toHaveLength(2); // the hold, and one settlement
    expect(await creditBalance(ts, ws.workspaceId)).toBe(10_000_000 - 54);
  });

  it('the end of a turn commits without the flush, and `done` goes out once a flush after it answered (the server)', async () => {
    const pool = ts.server.deps.db.sql;
    if (!process.env.DATABASE_URL) {
      // PGlite commits each statement in turn: no asynchronous commit, nothing to wait for.
      expect(pool.durable).toBeUndefined();
      return;
    }
    const barrier = pool.barrier as NonNullable<typeof pool.barrier>;
    const seen: string[] = [];
    const wait = barrier.wait.bind(barrier);
    const spy = vi.spyOn(barrier, 'wait').mockImplementation(() => {
      seen.push('asked');
      return wait().then(() => {
        seen.push('flushed');
      });
    });
    try {
      const { appId, res } = await streamTurn('Hello', { text: 'Durable.', prompt: 10, completion: 2 });
      // What the barrier had done when the client read `done`.
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      let text = '';
      let atDone: string[] | undefined;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
        if (!atDone && text.includes('"type":"done"')) atDone = [...seen];
      }
      expect(atDone).toEqual(['asked', 'flushed']);
      const stored = await sql<{ content: string }>(
        "select content from app_thread_messages where app_id = ? and role = 'assistant'",
        [appId],
      );
      expect(stored.map((m) => m.content)).toEqual(['Durable.']);
    } finally {
      spy.mockRestore();
    }
  });

  // PGlite has no barrier (the test above checks that).
  it.runIf(!!process.env.DATABASE_URL)(
    'a turn whose flush cannot be confirmed ends with `error`, not `done`, and is not settled twice (the server)',
    async () => {
      const pool = ts.server.deps.db.sql;
      const barrier = pool.barrier as NonNullable<typeof pool.barrier>;
      const spy = vi
        .spyOn(barrier, 'wait')
        .mockRejectedValue(new Error('Connection terminated unexpectedly'));
      try {
        const { ws, appId, res } = await streamTurn('Hello', {
          text: 'Unconfirmed.',
          prompt: 10,
          completion: 2,
        });
        const body = await res.text();
        expect(body).toContain('"type":"error"');
        expect(body).not.toContain('"type":"done"');
        expect(spy).toHaveBeenCalledTimes(1);
        // The end statement committed (only its flush is unconfirmed): the turn is stored once and
        // its hold settled once, by that statement.
        const stored = await sql<{ content: string }>(
          "select content from app_thread_messages where app_id = ? and role = 'assistant'",
          [appId],
        );
        expect(stored.map((m) => m.content)).toEqual(['Unconfirmed.']);
        const holds = await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId]);
        expect(holds).toHaveLength(0);
        const ledger = await sql("select 1 from credit_ledger where workspace_id = ? and kind <> 'grant'", [
          ws.workspaceId,
        ]);
        expect(ledger).toHaveLength(2); // the hold, and one settlement
      } finally {
        spy.mockRestore();
      }
    },
  );
});
