import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../test/harness.js';

/**
 * The end of a balance under a burst (issue 44, decision 0041), on whichever database the run
 * uses, at N = 20, 200 and 1000 concurrent requests:
 *
 * - app chat streams of the issue's 1990-character message (500-token replies, $100 / $200
 *   per million tokens) on a workspace whose balance pays for K answers: every admitted answer
 *   completes or the request is refused (402) before its first token; at least 0.9 × K
 *   complete; at most one request's cost is charged to answers that did not complete; no
 *   hold is left. Twice: with the issue's $3 (the holds leave some free balance for top-ups)
 *   and with exactly K holds' worth (none: every top-up within a hold fails);
 * - a first burst on a fresh token quota (2,000 tokens, ~26 a request; the process has seen no
 *   reply of the model yet), on `/chat` and on the OpenAI surface's chat completions (plain and
 *   streamed) at once: each serves at least half of what the quota pays for and uses at most
 *   the quota plus one request; the rest are refused up front (403 `Token limit exceeded`,
 *   OpenAI's 429 `insufficient_quota`).
 */

const MESSAGE = 'The metering of this service is being tested under a burst. '.repeat(40).slice(0, 1990);
/** 2000 characters = 500 output tokens, in 50 chunks 4 ms apart. */
const REPLY = 'abcd'.repeat(500);
const SHORT = 'Say hello to the metering test.';

let ts: TestServer & { fake: FakeOpenAI };
let rich: TestWorkspace;

const promptChars = (body: { messages?: { content?: unknown }[] }) =>
  (body.messages ?? []).reduce((n, m) => n + (typeof m.content === 'string' ? m.content.length : 0), 0);

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    env: {
      CHAT_MODEL_INPUT_PRICE_PER_MTOK: '100',
      CHAT_MODEL_OUTPUT_PRICE_PER_MTOK: '200',
      RATE_LIMIT_APP_CHAT: '0',
      RATE_LIMIT_CHAT: '0',
      // The first /chat burst waits for the first reply (~11 s here, on a busy machine more).
      METERING_FIRST_REPLY_WAIT_MS: '60000',
    },
    fake: {
      defaultReply: (body: { messages?: { content?: unknown }[] }) =>
        promptChars(body) < 200
          ? // Paced (~11 s) so that a burst's admissions all come before its first reply ends.
            { text: 'Hello from the fake model, with a few words.', chunkSize: 4, paceMs: 1000 }
          : {
              text: REPLY,
              chunkSize: 40,
              paceMs: 4,
              usage: { prompt_tokens: Math.ceil(promptChars(body) / 4), completion_tokens: REPLY.length / 4 },
            },
    },
  });
  rich = await createTestWorkspace(ts, { creditsUsd: '100000' });
}, 240_000);
afterAll(() => ts?.close());

const sql = <T>(q: string, params: unknown[] = []) => ts.server.deps.em().execute<T[]>(q, params);

async function createApp(key: string): Promise<string> {
  const res = await ts.api('/apps', { method: 'POST', key, json: { name: 'Balance end' } });
  return ((await res.json()) as { app: { id: string } }).app.id;
}

interface Stream {
  status: number;
  requestId: string;
  /** Tokens streamed before the end. */
  tokens: number;
  done: boolean;
}

async function stream(appId: string, key: string): Promise<Stream> {
  const res = await ts.api(`/apps/${appId}/chat/message/stream`, {
    method: 'POST',
    key,
    json: { message: MESSAGE, role: 'student' },
  });
  const text = await res.text();
  const events = text
    .split('\n')
    .filter((l) => l.startsWith('data: '))
    .map((l) => JSON.parse(l.slice(6)) as { type: string });
  return {
    status: res.status,
    requestId: res.headers.get('x-request-id') ?? '',
    tokens: events.filter((e) => e.type === 'token').length,
    done: events.at(-1)?.type === 'done',
    last: events.at(-1),
  } as Stream;
}

/** One complete answer's cost; the process learns the replies from the first three. */
let oneAnswer = 0;
/** The hold one answer takes once the process learned the replies (the fourth answer's). */
let oneHold = 0;

async function warmUp(): Promise<number> {
  if (oneAnswer > 0) return oneAnswer;
  const appId = await createApp(rich.apiKey);
  for (let i = 0; i < 4; i++) expect((await stream(appId, rich.apiKey)).done).toBe(true);
  const [row] = await sql<{ c: string }>(
    `select max(cost_micros) as c from usage_records
      where workspace_id = ? and endpoint = '/apps/{appId}/chat/message/stream' and provider_status = 'success'`,
    [rich.workspaceId],
  );
  oneAnswer = Number(row?.c);
  expect(oneAnswer).toBeGreaterThan(100_000);
  // The holds are the first debit of each request; the fourth one was sized from what was learned.
  const holds = await sql<{ a: string; ref: string }>(
    `select -amount_micros as a, ref from credit_ledger where workspace_id = ? and kind = 'debit' order by created_at`,
    [rich.workspaceId],
  );
  const last = holds.at(-1)?.ref;
  oneHold = Number(holds.find((h) => h.ref === last)?.a);
  return oneAnswer;
}

describe('app chat at the end of a balance: complete or refused before the first token', {
  timeout: 600_000,
}, () => {
  for (const n of [20, 200, 1000]) {
    for (const balance of ['issue', 'exact'] as const) {
      it(`N = ${n}, ${balance === 'issue' ? 'the issue’s $3' : 'exactly K holds'}`, async () => {
        const cost = await warmUp();
        // $3 (K = 19 at the prices), or 10 holds of the learned size exactly: no free
        // balance is left for a top-up once they are taken.
        expect(oneHold).toBeGreaterThanOrEqual(cost);
        const credits = balance === 'issue' ? 3_000_000 : 10 * oneHold;
        const k = Math.floor(credits / cost);
        const ws = await createTestWorkspace(ts, { creditsUsd: (credits / 1e6).toFixed(6) });
        const appId = await createApp(ws.apiKey);
        const results = await Promise.all(Array.from({ length: n }, () => stream(appId, ws.apiKey)));

        const completed = results.filter((r) => r.status === 200 && r.done);
        const refused = results.filter((r) => r.status === 402);
        const cut = results.filter((r) => r.status === 200 && !r.done);
        const recs = await sql<{ cost_micros: string; provider_status: string; request_id: string }>(
          'select cost_micros, provider_status, request_id from usage_records where workspace_id = ?',
          [ws.workspaceId],
        );
        const done = new Set(completed.map((r) => r.requestId));
        const chargedIncomplete = recs
          .filter((r) => !done.has(r.request_id))
          .reduce((s, r) => s + Number(r.cost_micros), 0);
        const used = recs.reduce((s, r) => s + Number(r.cost_micros), 0);
        const summary = JSON.stringify({
          n,
          k,
          cost,
          credits,
          completed: completed.length,
          refused: refused.length,
          cut: cut.length,
          cutTokens: cut.map((r) => r.tokens),
          cutLast: cut.map((r) => (r as unknown as { last: unknown }).last),
          used,
          chargedIncomplete,
        });
        // Complete or refused up front; at least 0.9 × K complete.
        expect(completed.length + refused.length, summary).toBe(n);
        expect(completed.length, summary).toBeGreaterThanOrEqual(Math.min(n, Math.ceil(0.9 * k)));
        // Refused before the first token: nothing recorded, nothing charged.
        const refusedIds = new Set(refused.map((r) => r.requestId));
        expect(
          recs.filter((r) => refusedIds.has(r.request_id)),
          summary,
        ).toEqual([]);
        // At most one request's cost charged to answers that did not complete; no unpaid work
        // beyond one request; no hold left.
        expect(chargedIncomplete, summary).toBeLessThanOrEqual(cost);
        expect(used, summary).toBeLessThanOrEqual(credits + cost);
        expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toEqual([]);
      });
    }
  }
});

/**
 * The surfaces of the monthly token quota, each asked a short message of its own (the fake's
 * requests tell them apart): `/chat`, and a catalog model's chat completion on the
 * OpenAI-compatible surface (every other request streamed; refused with 429 `insufficient_quota`).
 */
const quotaSurfaces = [
  { endpoint: '/chat', content: SHORT },
  { endpoint: '/openai/chat/completions', content: `${SHORT} (OpenAI)` },
] as const;

async function firstBurst(surface: (typeof quotaSurfaces)[number], n: number) {
  const quota = 2000;
  const ws = await createTestWorkspace(ts, { monthlyTokenQuota: quota });
  const messages = [{ role: 'user', content: surface.content }];
  const results = await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const stream = i % 2 === 1;
      const res = await ts.api(surface.endpoint, {
        method: 'POST',
        key: ws.apiKey,
        json: surface.endpoint === '/chat' ? { messages } : { model: 'fake-chat', messages, stream },
      });
      const body = await res.text();
      if (surface.endpoint === '/chat') {
        if (res.status === 200) return 'served';
        return res.status === 403 && JSON.parse(body).error === 'Token limit exceeded'
          ? 'refused'
          : `${res.status} ${body}`;
      }
      if (res.status === 429 && JSON.parse(body).error?.code === 'insufficient_quota') return 'refused';
      const done = stream ? body.trimEnd().endsWith('data: [DONE]') : res.status === 200;
      return res.status === 200 && done ? 'served' : `${res.status} ${body.slice(0, 200)}`;
    }),
  );
  const served = results.filter((r) => r === 'served').length;
  // Nothing but answers and refusals up front.
  expect(
    results.filter((r) => r !== 'served' && r !== 'refused'),
    surface.endpoint,
  ).toEqual([]);
  // The usage records are written in batches after the responses.
  await expect
    .poll(
      async () =>
        (await sql('select 1 from token_reservations where workspace_id = ?', [ws.workspaceId])).length,
      { timeout: 30_000 },
    )
    .toBe(0);
  const [one] = await sql<{ t: string }>(
    `select max(input_tokens + output_tokens) as t from usage_records where workspace_id = ? and endpoint = ?`,
    [ws.workspaceId, surface.endpoint],
  );
  const perRequest = Number(one?.t);
  const [u] = await sql<{ tokens: string }>(
    'select tokens from workspace_token_usage where workspace_id = ?',
    [ws.workspaceId],
  );
  const tokens = Number(u?.tokens);
  const pays = Math.floor(quota / perRequest);
  const summary = JSON.stringify({ surface: surface.endpoint, n, served, perRequest, pays, tokens });
  expect(perRequest, summary).toBeGreaterThan(10);
  expect(perRequest, summary).toBeLessThan(40);
  expect(served, summary).toBeGreaterThanOrEqual(Math.ceil(Math.min(n, pays) / 2));
  expect(tokens, summary).toBeLessThanOrEqual(quota + perRequest);
  return served;
}

describe('a first burst on a fresh token quota, /chat and the OpenAI surface', { timeout: 300_000 }, () => {
  for (const n of [20, 200, 1000]) {
    it(`N = ${n} on each: serves at least half of what the quota pays for, at most the quota plus one request`, async () => {
      // The process has seen no reply of the model on either endpoint: as a fresh server. The
      // two bursts run at once (each endpoint has its own first reply to wait for).
      const est = ts.server.deps.poolMetering.estimator as unknown as {
        recent: Map<string, number[]>;
        inputRatios: Map<string, number[]>;
      };
      for (const map of [est.recent, est.inputRatios])
        for (const key of [...map.keys()])
          if (quotaSurfaces.some((q) => key.endsWith(` ${q.endpoint}`))) map.delete(key);
      const before = ts.fake.requests.length;
      const served = await Promise.all(quotaSurfaces.map((q) => firstBurst(q, n)));
      // Refused up front: only the served requests reached the model, per surface.
      const upstream = ts.fake.requests.slice(before);
      for (const [i, q] of quotaSurfaces.entries()) {
        const calls = upstream.filter((r) => JSON.stringify(r.body).includes(JSON.stringify(q.content)));
        expect(calls.length, q.endpoint).toBe(served[i]);
      }
    });
  }
});
