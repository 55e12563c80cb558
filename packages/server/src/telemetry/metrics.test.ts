import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAgentWithSession, openTurn } from '../domains/agents/test-helpers.js';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../test/harness.js';

/** One sample of a scrape: name, labels, value. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function parse(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`unparsable exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1] as string] = (l[2] as string).replace(/\\(.)/g, '$1');
    }
    out.push({ name: m[1] as string, labels, value: Number(m[3]) });
  }
  return out;
}

/** The sum of the samples named `name` whose labels include `want`. */
const sum = (samples: Sample[], name: string, want: Record<string, string> = {}) =>
  samples
    .filter((s) => s.name === name && Object.entries(want).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let metricsUrl: string;

const scrape = async () => {
  const res = await fetch(metricsUrl);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parse(await res.text());
};

const chat = (key: string, content: string) =>
  ts.api('/chat', {
    method: 'POST',
    key,
    json: { model: 'fake-chat', messages: [{ role: 'user', content }] },
  });

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    env: { METRICS_PORT: '0', RATE_LIMIT_CHAT: '4', RUN_POLL_INTERVAL_MS: '100' },
  });
  // The harness listens on the API port itself; the metrics listener starts with it.
  const again = await ts.server.listen(0, '127.0.0.1');
  metricsUrl = again.metricsUrl as string;
  again.http.close();
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
}, 120_000);

afterAll(async () => {
  await ts?.close();
});

describe('GET /metrics on its own listener', () => {
  it('listens on 127.0.0.1 by default and is not served on the API port', async () => {
    expect(new URL(metricsUrl).hostname).toBe('127.0.0.1');
    const onApi = await fetch(`${ts.url}/metrics`);
    expect(onApi.status).toBe(404);
    expect((await fetch(metricsUrl.replace('/metrics', '/other'))).status).toBe(404);
    const s = await scrape();
    // prom-client's default process metrics
    expect(s.some((x) => x.name === 'process_cpu_user_seconds_total')).toBe(true);
    expect(s.some((x) => x.name === 'nodejs_eventloop_lag_seconds')).toBe(true);
  });

  it('counts /chat requests by route template and sums the tokens the upstream reported', async () => {
    const before = await scrape();
    const usages = [
      { prompt_tokens: 11, completion_tokens: 7 },
      { prompt_tokens: 23, completion_tokens: 5 },
      { prompt_tokens: 4, completion_tokens: 9 },
    ];
    ts.fake.script(...usages.map((usage) => ({ text: 'Some reply text.', usage })));
    for (let i = 0; i < usages.length; i++) {
      const res = await chat(ws.apiKey, `question ${i}`);
      expect(res.status).toBe(200);
      await res.text();
    }
    const after = await scrape();
    const delta = (name: string, want: Record<string, string> = {}) =>
      sum(after, name, want) - sum(before, name, want);
    expect(
      delta('http_server_request_duration_seconds_count', {
        http_request_method: 'POST',
        http_route: '/api/v1/chat',
        http_response_status_code: '200',
      }),
    ).toBe(3);
    const model = {
      gen_ai_request_model: 'fake-chat',
      gen_ai_operation_name: 'chat',
      gen_ai_provider_name: 'openai',
    };
    expect(delta('gen_ai_client_token_usage_sum', { ...model, gen_ai_token_type: 'input' })).toBe(38);
    expect(delta('gen_ai_client_token_usage_sum', { ...model, gen_ai_token_type: 'output' })).toBe(21);
    expect(delta('gen_ai_client_token_usage_count', { ...model, gen_ai_token_type: 'input' })).toBe(3);
    expect(delta('gen_ai_client_operation_duration_seconds_count', { ...model, error_type: '' })).toBe(3);
    expect(delta('gen_ai_server_time_to_first_token_seconds_count', model)).toBe(3);
  });

  it('counts rate-limited requests per bucket and metering refusals by reason', async () => {
    const limited = await createTestWorkspace(ts, { creditsUsd: '10' });
    const noQuota = await createTestWorkspace(ts, { monthlyTokenQuota: 0 });
    const before = await scrape();
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await chat(limited.apiKey, 'hi');
      statuses.push(res.status);
      await res.text();
    }
    expect(statuses.filter((s) => s === 429)).toHaveLength(2);
    const refused = await chat(noQuota.apiKey, 'hi');
    expect(refused.status).toBe(403);
    await refused.text();
    const after = await scrape();
    const delta = (name: string, want: Record<string, string> = {}) =>
      sum(after, name, want) - sum(before, name, want);
    expect(delta('aisuite_rate_limited_requests_total', { bucket: 'chat' })).toBe(2);
    expect(delta('aisuite_metering_refusals_total', { reason: 'token_quota' })).toBe(1);
    expect(
      delta('http_server_request_duration_seconds_count', {
        http_route: '/api/v1/chat',
        http_response_status_code: '429',
      }),
    ).toBe(2);
  });

  it('observes an agent turn (SSE) when it ends, with its route template, credits and runs', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Metrics' });
    const before = await scrape();
    const costBefore = await creditsCharged();
    ts.fake.script({ text: 'A streamed answer.', usage: { prompt_tokens: 30, completion_tokens: 12 } });
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Hi' });
    await turn.rest();
    const route = '/api/v1/managed-agents/sessions/{sessionId}/messages';
    // The stream has ended for the client; the server observes it as its response closes.
    let after = await scrape();
    for (
      let i = 0;
      i < 50 &&
      sum(after, 'http_server_request_duration_seconds_count', { http_route: route }) ===
        sum(before, 'http_server_request_duration_seconds_count', { http_route: route });
      i++
    ) {
      await new Promise((r) => setTimeout(r, 100));
      after = await scrape();
    }
    const delta = (name: string, want: Record<string, string> = {}) =>
      sum(after, name, want) - sum(before, name, want);
    expect(
      delta('http_server_request_duration_seconds_count', {
        http_route: route,
        http_response_status_code: '200',
      }),
    ).toBe(1);
    expect(delta('gen_ai_client_token_usage_sum', { gen_ai_token_type: 'input' })).toBe(30);
    expect(delta('gen_ai_client_token_usage_sum', { gen_ai_token_type: 'output' })).toBe(12);
    // Credits debited: what the usage records charged.
    const charged = (await creditsCharged()) - costBefore;
    expect(charged).toBeGreaterThan(0);
    expect(delta('aisuite_credits_debited_usd_total')).toBeCloseTo(charged / 1_000_000, 9);
    expect(sum(after, 'aisuite_sse_streams_open')).toBe(0);
    expect(after.some((s) => s.name === 'aisuite_runs_queued')).toBe(true);
    expect(after.some((s) => s.name === 'aisuite_rag_indexing_queue')).toBe(true);
    expect(after.some((s) => s.name === 'aisuite_vector_index_memory_bytes')).toBe(true);
    expect(sum(after, 'aisuite_db_pool_connections', { pool: 'orm' })).toBeGreaterThan(0);
    expect(after.some((s) => s.name === 'aisuite_db_pool_connections' && s.labels.pool === 'hot')).toBe(true);
  });

  it('names unknown paths `other` and carries no id or email in any label value', async () => {
    const before = await scrape();
    const res = await ts.api(`/no-such/${ws.workspaceId}`, { key: ws.apiKey });
    expect(res.status).toBe(404);
    await res.text();
    const after = await scrape();
    expect(
      sum(after, 'http_server_request_duration_seconds_count', {
        http_route: 'other',
        http_response_status_code: '404',
      }) -
        sum(before, 'http_server_request_duration_seconds_count', {
          http_route: 'other',
          http_response_status_code: '404',
        }),
    ).toBe(1);
    const rows = await ts.server.deps
      .em()
      .execute<{ id: string }[]>(
        `select id::text as id from runs union all select id::text from agent_sessions union all select id::text from api_keys union all select id::text from workspaces`,
      );
    const ids = new Set(rows.map((r) => r.id));
    expect(ids.size).toBeGreaterThan(3);
    for (const s of after) {
      for (const [k, v] of Object.entries(s.labels)) {
        expect(ids.has(v), `${s.name} ${k}=${v}`).toBe(false);
        expect(v, `${s.name} ${k}`).not.toMatch(
          /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i,
        );
        expect(v, `${s.name} ${k}`).not.toContain('@');
        expect(v, `${s.name} ${k}`).not.toContain(ws.apiKey);
      }
    }
  });
});

async function creditsCharged(): Promise<number> {
  const rows = await ts.server.deps
    .em()
    .execute<{ c: string | null }[]>(
      `select sum(cost_micros)::text as c from usage_records where meter = 'credits'`,
    );
  return Number(rows[0]?.c ?? 0);
}
