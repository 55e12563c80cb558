import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MESSAGES_ENDPOINT, turnHoldGuesses } from '../domains/agents/turn-hold.js';
import {
  ARTIFACT_REPORT,
  BURST_IMAGE_MODELS,
  type ImageUpstreams,
  indexedDocumentQA,
  requestImage,
  startImageUpstreams,
} from '../test/bursts.js';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../test/harness.js';

/**
 * The metering invariants under bursts (issues 18 and 44, decisions 0020 and 0041), on
 * whichever database the run uses, for every credit-metered capability (the OpenAI-compatible
 * surface's agent models included) and the monthly token quota (`/chat` and the OpenAI surface's
 * chat completions): a balance that pays for K = 10 answers, bursts of N = 20, 200 and 1000
 * (the capability table of `docs/models-and-metering.md`; `metering/balance-end.test.ts` adds
 * the app-chat streams and the first burst on a fresh quota, `/chat` and the OpenAI
 * surface, at 20, 200 and 1000).
 *
 * - no unpaid work: recorded usage ≤ the credits + one request's cost;
 * - no starvation: at least 0.9 × K answers complete;
 * - complete or refused up front: every request but at most one completes or is refused
 *   before its first token, and none ends with neither (a 500, a reset connection);
 * - no charge without an answer: what the incomplete requests were charged ≤ one request's
 *   cost; refused ones hold and cost nothing (no ledger line, no record, no hold left);
 * - the quota: tokens used ≤ Q + one request's tokens, the rest refused up front (403
 *   `Token limit exceeded`; on the OpenAI surface 429 `insufficient_quota`).
 *
 * Each capability first completes a few replies on another workspace, so the per-model
 * estimate of the reply length has learned it (that is what sizes the holds).
 */

let ts: TestServer & { fake: FakeOpenAI };
let rich: TestWorkspace;
let imageUpstreams: ImageUpstreams;
const K = 10;
/**
 * Every capability at 20 and 200 concurrent requests, and at 1000 (`at1000`); app-chat streams
 * at 1000 are `balance-end.test.ts`'s, and the two variants with the hold taken in the
 * admission run at 20 and 200.
 */
const BURSTS = [20, 200];

const artifactBody = {
  scope: { level: 'organization', entityId: 'org-1', label: 'Acme' },
  input: { aggregates: { recordCount: 120, metrics: { activeUsers: 80 } } },
  period: { start: '2026-10-01', end: '2026-10-31' },
};

beforeAll(async () => {
  // Images: a Replicate model priced per image, and a gpt-image-like model priced per image
  // plus its tokens ($5 / $40 per million; 272 output tokens an image).
  imageUpstreams = await startImageUpstreams({ perImage: '0.01', altPerImage: '0.02' });
  ts = await startTestServerWithFakeModel({
    env: {
      ...imageUpstreams.env,
      RATE_LIMIT_APP_CHAT: '0',
      RATE_LIMIT_AGENT_MESSAGE: '0',
      RATE_LIMIT_SESSION_CREATE: '0',
      RATE_LIMIT_CHAT: '0',
      RUN_POLL_INTERVAL_MS: '50',
      RUN_WORKER_CONCURRENCY: '8',
    },
    fake: {
      // Replies of 60 chunks (60 output tokens), paced so that a burst overlaps; artifacts get
      // a report that validates.
      defaultReply: (body: { response_format?: unknown }) =>
        body.response_format
          ? { text: ARTIFACT_REPORT, chunkSize: 64 }
          : { text: 'abcd'.repeat(60), chunkSize: 4, paceMs: 1 },
    },
  });
  rich = await createTestWorkspace(ts, { creditsUsd: '100' });
}, 120_000);
afterAll(async () => {
  await ts?.close();
  await imageUpstreams?.close();
});

const json = async <T = any>(res: Response): Promise<T> => (await res.json()) as T;
const sql = <T>(q: string, params: unknown[] = []) => ts.server.deps.em().execute<T[]>(q, params);

async function createApp(key: string): Promise<string> {
  const res = await ts.api('/apps', { method: 'POST', key, json: { name: 'Burst' } });
  return (await json(res)).app.id as string;
}

async function createAgent(key: string, autonomous = false): Promise<string> {
  const res = await ts.api('/managed-agents/agents', {
    method: 'POST',
    key,
    json: {
      name: 'Burst',
      prompt: 'You answer.',
      ...(autonomous
        ? { config: { runtimeMode: 'autonomous', capabilities: { deliverables: { enabled: true } } } }
        : {}),
    },
  });
  return (await json(res)).agent.id as string;
}

async function createSession(key: string, agentId: string): Promise<string> {
  const res = await ts.api(`/managed-agents/agents/${agentId}/sessions`, { method: 'POST', key, json: {} });
  return (await json(res)).session.id as string;
}

/**
 * `n` sessions of the agent: the first through the API, the rest in one statement writing the
 * rows the API writes (1000 sessions through the API cost a burst's time before each burst).
 */
async function createSessions(ws: TestWorkspace, agentId: string, n: number): Promise<string[]> {
  const first = await createSession(ws.apiKey, agentId);
  if (n <= 1) return [first];
  const rows = await sql<{ id: string }>(
    `insert into agent_sessions (id, workspace_id, app_id, mount, metadata, origin_source)
     select g.id, ?, ?, '/agents/' || ? || '/sessions/' || g.id::text, '{}'::jsonb, 'api'
       from (select gen_random_uuid() as id from generate_series(2, ?)) g
     returning id`,
    [ws.workspaceId, agentId, agentId, n],
  );
  return [first, ...rows.map((r) => r.id)];
}

/** `other`: neither an answer, nor a refusal, nor an answer failed mid-way (a 500, a reset socket). */
type Outcome = 'completed' | 'refused' | 'failed' | 'other';

/** An agent turn in one of `sessions` (round robin): completed, refused (402, up front or at its hold) or failed. */
function agentTurn(ws: TestWorkspace, sessions: string[]) {
  return async (_ws: TestWorkspace, i: number): Promise<Outcome> => {
    const res = await ts.api(`/managed-agents/sessions/${sessions[i % sessions.length]}/messages`, {
      method: 'POST',
      key: ws.apiKey,
      json: { message },
    });
    if (res.status === 402) {
      await res.text();
      return 'refused';
    }
    if (res.status !== 200) return 'failed';
    const text = await res.text();
    if (text.includes('"type":"run.completed"')) return 'completed';
    // A hold refused when the run started: the turn fails before any model call.
    return text.includes('INSUFFICIENT_CREDITS') ? 'refused' : 'failed';
  };
}
/**
 * One request of a capability; resolves whether it completed, was refused (402) or failed,
 * with its `X-Request-Id` when its usage records carry it (then what each request was charged
 * is checked per request, not only per record).
 */
type Attempt = (ws: TestWorkspace, i: number) => Promise<Outcome | { outcome: Outcome; requestId: string }>;

interface Capability {
  name: string;
  endpoint: string;
  /** Per-workspace setup (apps, agents, sessions) before a burst of `n`. */
  setup(ws: TestWorkspace, n: number): Promise<Attempt>;
  /** Checks of its own after the burst. */
  after?(ws: TestWorkspace): Promise<void>;
  /** Also a burst of 1000. */
  at1000?: boolean;
}

/** Sessions of the last agent-turn setup (their guesses seed the next one's). */
let warmSessions: string[] = [];

const message = 'Tell me about metering. '.repeat(8);

const capabilities: Capability[] = [
  {
    name: 'app chat, plain',
    endpoint: '/apps/{appId}/chat/message',
    at1000: true,
    async setup(ws) {
      const appId = await createApp(ws.apiKey);
      return async () => {
        const res = await ts.api(`/apps/${appId}/chat/message`, {
          method: 'POST',
          key: ws.apiKey,
          json: { message, role: 'student' },
        });
        await res.text();
        // 402 up front or mid-way (its usage record tells), 502 an upstream failure mid-way.
        if (res.status === 200) return 'completed';
        if (res.status === 402) return 'refused';
        return res.status === 502 ? 'failed' : 'other';
      };
    },
  },
  {
    name: 'app chat, streaming',
    endpoint: '/apps/{appId}/chat/message/stream',
    async setup(ws) {
      const appId = await createApp(ws.apiKey);
      return async () => {
        const res = await ts.api(`/apps/${appId}/chat/message/stream`, {
          method: 'POST',
          key: ws.apiKey,
          json: { message, role: 'student' },
        });
        const text = await res.text();
        if (res.status === 402) return 'refused';
        if (res.status !== 200) return 'failed';
        const last = text
          .split('\n')
          .filter((l) => l.startsWith('data: '))
          .map((l) => JSON.parse(l.slice(6)))
          .at(-1);
        return last?.type === 'done' ? 'completed' : 'failed';
      };
    },
  },
  {
    // The process knows the app before the burst (a request for an unknown thread reads it):
    // every hold is taken by the admission statement itself (decision 0027).
    name: 'app chat, streaming, hold in the admission',
    endpoint: '/apps/{appId}/chat/message/stream',
    async setup(ws) {
      const appId = await createApp(ws.apiKey);
      const seen = await ts.api(`/apps/${appId}/chat/message/stream`, {
        method: 'POST',
        key: ws.apiKey,
        json: { message, role: 'student', threadId: randomUUID() },
      });
      expect(seen.status).toBe(404);
      await seen.text();
      return async () => {
        const res = await ts.api(`/apps/${appId}/chat/message/stream`, {
          method: 'POST',
          key: ws.apiKey,
          json: { message, role: 'student' },
        });
        const text = await res.text();
        if (res.status === 402)
          return { outcome: 'refused', requestId: res.headers.get('x-request-id') ?? '' };
        const last = text
          .split('\n')
          .filter((l) => l.startsWith('data: '))
          .map((l) => JSON.parse(l.slice(6)))
          .at(-1);
        return {
          outcome: res.status === 200 && last?.type === 'done' ? 'completed' : 'failed',
          requestId: res.headers.get('x-request-id') ?? '',
        };
      };
    },
  },
  {
    name: 'agent turns',
    endpoint: '/managed-agents/sessions/{sessionId}/messages',
    at1000: true,
    async setup(ws, n) {
      const agentId = await createAgent(ws.apiKey);
      return agentTurn(ws, await createSessions(ws, agentId, n));
    },
  },
  {
    // The process ran a turn in each session before (decision 0029): every admission holds
    // the first model call's credits itself. The guesses are those of an identical agent's
    // sessions (the rich workspace's, which ran three turns), made this agent's.
    name: 'agent turns, hold in the admission',
    endpoint: '/managed-agents/sessions/{sessionId}/messages',
    async setup(ws, n) {
      const agentId = await createAgent(ws.apiKey);
      const sessions = await createSessions(ws, agentId, n);
      const template = warmSessions.map((s) => turnHoldGuesses.get(s)).find((g) => g !== undefined);
      if (template) {
        const [row] = await sql<{ u: string }>(
          "select row_to_json(a)->>'updated_at' as u from apps a where id = ?",
          [agentId],
        );
        for (const s of sessions)
          turnHoldGuesses.set(s, { ...template, agentId, agentUpdatedAt: row?.u as string });
      }
      warmSessions = sessions;
      return agentTurn(ws, sessions);
    },
    async after(ws) {
      // Holds taken by the admissions: the hold's ledger line is the run's transaction's.
      const [held] = await sql<{ n: string }>(
        `select count(*) as n from runs r join credit_ledger l
            on l.ref = r.input->>'requestId' and l.kind = 'debit' and l.created_at = r.created_at
          where r.workspace_id = ?`,
        [ws.workspaceId],
      );
      expect(Number(held?.n)).toBeGreaterThanOrEqual(Math.ceil(0.9 * K));
    },
  },
  {
    name: 'autonomous runs',
    endpoint: '/managed-agents/agents/{agentId}/runs',
    at1000: true,
    async setup(ws) {
      const agentId = await createAgent(ws.apiKey, true);
      return async () => {
        const res = await ts.api(`/managed-agents/agents/${agentId}/runs`, {
          method: 'POST',
          key: ws.apiKey,
          json: { task: message },
        });
        if (res.status === 402) return 'refused';
        if (res.status !== 201) return 'failed';
        const { runId } = await json<{ runId: string }>(res);
        // Polled every 50 ms at first, then less often (up to every 2 s): 200 runs polled every
        // 50 ms kept the shared machine busy answering the polls.
        for (let polls = 0; ; polls++) {
          const d = await json(
            await ts.api(`/managed-agents/agents/${agentId}/runs/${runId}`, { key: ws.apiKey }),
          );
          if (d.run.status === 'completed') return 'completed';
          if (d.run.status === 'failed' || d.run.status === 'cancelled') {
            // Refused at its hold (before any model call) or stopped mid-way.
            return String(d.run.error ?? '').includes('Insufficient credits') &&
              !(await sql('select 1 from usage_records where run_id = ?', [runId])).length
              ? 'refused'
              : 'failed';
          }
          await new Promise((r) => setTimeout(r, Math.min(2000, 50 * 1.5 ** polls)));
        }
      };
    },
  },
  ...BURST_IMAGE_MODELS.map(
    (model): Capability => ({
      name: `image (${model})`,
      endpoint: '/image',
      at1000: true,
      async setup(ws) {
        return async () => requestImage(ts, ws.apiKey, model);
      },
    }),
  ),
  {
    name: 'document QA',
    endpoint: '/rag/query',
    at1000: true,
    async setup(ws) {
      return indexedDocumentQA(ts, ws);
    },
  },
  {
    name: 'artifacts',
    endpoint: '/artifacts/generate',
    at1000: true,
    async setup(ws) {
      return async () => {
        const res = await ts.api('/artifacts/generate', {
          method: 'POST',
          key: ws.apiKey,
          json: artifactBody,
        });
        await res.text();
        return res.status === 200 || res.status === 201
          ? 'completed'
          : res.status === 402
            ? 'refused'
            : 'failed';
      };
    },
  },
  {
    // `model: "agent/<id>"` on the OpenAI-compatible surface: a native turn in a session of its
    // own (no `user`), metered as the native turn; every other request streamed. Spent credits
    // are OpenAI's 429 `insufficient_quota`, before the first chunk.
    name: 'OpenAI surface, agent model (plain and streamed)',
    endpoint: MESSAGES_ENDPOINT,
    at1000: true,
    async setup(ws) {
      const agentId = await createAgent(ws.apiKey);
      return async (_ws, i) => {
        const stream = i % 2 === 1;
        const res = await ts.api('/openai/chat/completions', {
          method: 'POST',
          key: ws.apiKey,
          json: { model: `agent/${agentId}`, messages: [{ role: 'user', content: message }], stream },
        });
        const text = await res.text();
        const requestId = res.headers.get('x-request-id') ?? '';
        if (res.status === 429 && text.includes('"insufficient_quota"'))
          return { outcome: 'refused', requestId };
        if (res.status !== 200) return { outcome: 'failed', requestId };
        const done = stream
          ? text.trimEnd().endsWith('data: [DONE]')
          : JSON.parse(text).choices?.[0]?.finish_reason === 'stop';
        return { outcome: done ? 'completed' : 'failed', requestId };
      };
    },
  },
];

describe('credit bursts: no unpaid work, no starvation, no charge without an answer', {
  timeout: 300_000,
}, () => {
  for (const cap of capabilities)
    for (const N of cap.at1000 ? [...BURSTS, 1000] : BURSTS) {
      it(`${cap.name}, N = ${N}`, async () => {
        // Learn the reply length, and one complete request's cost, on a workspace of its own
        // (the two image models share an endpoint: their costs must not mix).
        const rich = await createTestWorkspace(ts, { creditsUsd: '100' });
        const attemptRich = await cap.setup(rich, 3);
        for (let i = 0; i < 3; i++) {
          const r = await attemptRich(rich, i);
          expect(typeof r === 'string' ? r : r.outcome).toBe('completed');
        }
        // A request's cost: all its records (document QA: the query embedding and the answer).
        const costs = await sql<{ c: string }>(
          `select sum(cost_micros) as c from usage_records
          where workspace_id = ? and endpoint = ? and provider_status = 'success' group by request_id`,
          [rich.workspaceId, cap.endpoint],
        );
        const cost = Math.max(...costs.map((r) => Number(r.c)));
        expect(cost).toBeGreaterThan(0);

        const credits = K * cost;
        const ws = await createTestWorkspace(ts, { creditsUsd: (credits / 1e6).toFixed(6) });
        const attempt = await cap.setup(ws, N);
        const results = await Promise.all(Array.from({ length: N }, (_, i) => attempt(ws, i)));
        const outcomes = results.map((r) => (typeof r === 'string' ? r : r.outcome));

        const completed = outcomes.filter((o) => o === 'completed').length;
        const recs = await sql<{ cost_micros: string; provider_status: string; request_id: string }>(
          'select cost_micros, provider_status, request_id from usage_records where workspace_id = ?',
          [ws.workspaceId],
        );
        const used = recs.reduce((s, r) => s + Number(r.cost_micros), 0);
        const incomplete = recs
          .filter((r) => r.provider_status !== 'success')
          .reduce((s, r) => s + Number(r.cost_micros), 0);
        const balance = Number(
          (
            await sql<{ b: string }>('select credit_balance_micros as b from workspaces where id = ?', [
              ws.workspaceId,
            ])
          )[0]?.b,
        );
        const summary = {
          cap: cap.name,
          N,
          outcomes: count(outcomes),
          cost,
          credits,
          used,
          incomplete,
          balance,
        };

        // Every request answered, refused or failed mid-way: none ended with anything else.
        expect(outcomes.filter((o) => o === 'other').length, JSON.stringify(summary)).toBe(0);
        // No starvation.
        expect(completed, JSON.stringify(summary)).toBeGreaterThanOrEqual(Math.ceil(0.9 * K));
        // No unpaid work.
        expect(used, JSON.stringify(summary)).toBeLessThanOrEqual(credits + cost);
        expect(balance).toBeGreaterThanOrEqual(-cost);
        // No charge without an answer.
        expect(incomplete, JSON.stringify(summary)).toBeLessThanOrEqual(cost);
        // Per request, where the records carry the request id: what the requests that did not
        // complete were charged, whatever the status of their records (document QA: an
        // embedding paid for by a query then refused would be a charge without an answer).
        const ids = results.filter((r) => typeof r !== 'string');
        if (ids.length > 0) {
          const completedIds = new Set(ids.filter((r) => r.outcome === 'completed').map((r) => r.requestId));
          const charged = recs
            .filter((r) => !completedIds.has(r.request_id))
            .reduce((s, r) => s + Number(r.cost_micros), 0);
          expect(charged, JSON.stringify(summary)).toBeLessThanOrEqual(cost);
          // Refused ones: nothing recorded at all.
          const refusedIds = new Set(ids.filter((r) => r.outcome === 'refused').map((r) => r.requestId));
          expect(recs.filter((r) => refusedIds.has(r.request_id))).toEqual([]);
        }
        // What the ledger took is what was recorded (refused requests: nothing), and no hold is left.
        const ledger = await sql<{ amount_micros: string; kind: string; ref: string }>(
          "select amount_micros, kind, ref from credit_ledger where workspace_id = ? and kind <> 'grant'",
          [ws.workspaceId],
        );
        const net = -ledger.reduce((s, l) => s + Number(l.amount_micros), 0);
        expect(net).toBe(credits - balance);
        expect(net).toBeLessThanOrEqual(used);
        expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toHaveLength(
          0,
        );
        expect(
          completed + outcomes.filter((o) => o === 'refused').length,
          JSON.stringify(summary),
        ).toBeGreaterThanOrEqual(N - 1);
        await cap.after?.(ws);
      });
    }
});

const count = (xs: string[]) => {
  const m: Record<string, number> = {};
  for (const x of xs) m[x] = (m[x] ?? 0) + 1;
  return m;
};

/**
 * A surface metered by the monthly token quota: `/chat`, and a catalog model's chat completion
 * on the OpenAI-compatible surface (every other request streamed), whose refusal is OpenAI's
 * 429 `insufficient_quota`.
 */
interface QuotaSurface {
  name: string;
  endpoint: string;
  request(key: string, i: number): Promise<Response>;
  /** 'ok' (a complete answer), 'refused' (up front, the quota's refusal) or 'other'. */
  outcome(status: number, body: string, i: number): 'ok' | 'refused' | 'other';
}

const quotaSurfaces: QuotaSurface[] = [
  {
    name: '/chat',
    endpoint: '/chat',
    request: (key) =>
      ts.api('/chat', {
        method: 'POST',
        key,
        json: { messages: [{ role: 'user', content: 'Hello there' }] },
      }),
    outcome: (status, body) =>
      status === 200
        ? 'ok'
        : status === 403 && JSON.parse(body).error === 'Token limit exceeded'
          ? 'refused'
          : 'other',
  },
  {
    name: 'the OpenAI surface (plain and streamed)',
    endpoint: '/openai/chat/completions',
    request: (key, i) =>
      ts.api('/openai/chat/completions', {
        method: 'POST',
        key,
        json: {
          model: 'fake-chat',
          messages: [{ role: 'user', content: 'Hello there' }],
          stream: i % 2 === 1,
        },
      }),
    outcome: (status, body, i) => {
      if (status === 429 && JSON.parse(body).error?.code === 'insufficient_quota') return 'refused';
      if (status !== 200) return 'other';
      const done =
        i % 2 === 1 ? body.trimEnd().endsWith('data: [DONE]') : JSON.parse(body).choices?.length === 1;
      return done ? 'ok' : 'other';
    },
  },
];

describe('the token quota under a burst', { timeout: 120_000 }, () => {
  for (const surface of quotaSurfaces)
    for (const N of [...BURSTS, 1000])
      it(`${surface.name}, N = ${N}: uses at most Q plus one request; the rest are refused up front`, async () => {
        const records = async () =>
          (
            await sql('select 1 from usage_records where workspace_id = ? and endpoint = ?', [
              rich.workspaceId,
              surface.endpoint,
            ])
          ).length;
        const seen = await records();
        for (let i = 0; i < 3; i++) {
          const res = await surface.request(rich.apiKey, i);
          expect(res.status).toBe(200);
          await res.text();
        }
        // The usage records are written in batches, after the responses: wait for the three.
        await expect.poll(records, { timeout: 30_000 }).toBeGreaterThanOrEqual(seen + 3);
        const [one] = await sql<{ t: string }>(
          `select max(input_tokens + output_tokens) as t from usage_records where workspace_id = ? and endpoint = ?`,
          [rich.workspaceId, surface.endpoint],
        );
        const perRequest = Number(one?.t);
        expect(perRequest).toBeGreaterThan(0);
        const quota = K * perRequest;
        const ws = await createTestWorkspace(ts, { monthlyTokenQuota: quota });
        const before = ts.fake.requests.length;
        const outcomes = await Promise.all(
          Array.from({ length: N }, async (_, i) => {
            const res = await surface.request(ws.apiKey, i);
            const body = await res.text();
            const outcome = surface.outcome(res.status, body, i);
            return outcome === 'other' ? `${res.status} ${body.slice(0, 200)}` : outcome;
          }),
        );
        const ok = outcomes.filter((o) => o === 'ok').length;
        const refused = outcomes.filter((o) => o === 'refused').length;
        // Every request answered or refused up front with the quota's refusal ("other" = 0).
        expect(
          outcomes.filter((o) => o !== 'ok' && o !== 'refused'),
          JSON.stringify({ N, ok, refused }),
        ).toEqual([]);
        // Refused up front: only the admitted ones reached the model.
        expect(ts.fake.requests.length - before).toBe(ok);
        expect(ok).toBeGreaterThanOrEqual(Math.ceil(0.9 * K));
        // Every reservation is released with its usage record (written in batches, after the
        // responses): wait for them, then what was used.
        await expect
          .poll(
            async () =>
              (await sql('select 1 from token_reservations where workspace_id = ?', [ws.workspaceId])).length,
            { timeout: 30_000 },
          )
          .toBe(0);
        const [u] = await sql<{ tokens: string; reserved: string }>(
          'select tokens, reserved from workspace_token_usage where workspace_id = ?',
          [ws.workspaceId],
        );
        expect(Number(u?.reserved)).toBe(0);
        expect(Number(u?.tokens)).toBeLessThanOrEqual(quota + perRequest);
        // The next request is refused.
        const next = await surface.request(ws.apiKey, 0);
        const nextBody = await next.text();
        expect(surface.outcome(next.status, nextBody, 0)).toBe('refused');
      });
});
