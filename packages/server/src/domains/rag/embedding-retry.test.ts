import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createTestSession,
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestSession,
  type TestWorkspace,
} from '../../test/harness.js';
import { RAG_UPLOAD_ENDPOINT } from './ingest.js';
import { RAG_QUERY_ENDPOINT } from './query.js';

/**
 * Embeddings are retried (issue 14: "batched, retried, metered"): connection resets, 429 and
 * 5xx are retried with backoff or after the upstream's `Retry-After`; other 4xx are not; a
 * retried call is charged once. Against the fake upstream over HTTP, told to fail its next
 * embeddings requests.
 */
let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let session: TestSession;

const embeddingRequests = () => ts.fake.requests.filter((r) => r.path.endsWith('/embeddings'));

function form(name: string, body: string) {
  const fd = new FormData();
  fd.append('workspace_id', ws.workspaceId);
  fd.append('files[]', new Blob([body], { type: 'text/plain' }), name);
  return fd;
}

const upload = (name: string, body: string) =>
  ts.api('/rag/upload', { method: 'POST', key: session.token, body: form(name, body) });

async function usage(endpoint: string) {
  return ts.server.deps
    .em()
    .execute<{ input_tokens: string; cost_micros: string; provider_status: string }[]>(
      `select input_tokens, cost_micros, provider_status from usage_records
       where workspace_id = ? and endpoint = ? and model = 'fake-embed' order by created_at`,
      [ws.workspaceId, endpoint],
    );
}

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    fake: { defaultReply: { text: 'The answer [1].' } },
    env: { EMBEDDING_MAX_RETRIES: '3' },
  });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  session = await createTestSession(ts, ws);
}, 180_000);

afterAll(async () => {
  await ts?.close();
});

beforeEach(() => ts.fake.reset());

describe('embeddings retried', { timeout: 120_000 }, () => {
  it('an upload whose embeddings fail three times (429 Retry-After, reset, 503) is indexed, charged once', async () => {
    ts.fake.scriptEmbeddings(
      { error: { status: 429, message: 'Rate limit reached', type: 'rate_limit_error' }, retryAfter: '0' },
      { reset: true },
      { error: { status: 503, message: 'overloaded', type: 'server_error' } },
    );
    const text = 'The lighthouse keeper logs the fog horn every night. The lamp is cleaned on Sundays.';
    const res = await upload('keeper.txt', text);
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.results.details[0]).toMatchObject({ filename: 'keeper.txt', status: 'completed', chunks: 1 });
    // Three failed attempts, then the one that answered: the same input each time.
    const reqs = embeddingRequests();
    expect(reqs).toHaveLength(4);
    for (const r of reqs) expect(r.body.input).toEqual([text]);
    // Metered once: the tokens of the answered attempt (the fake counts ceil(chars / 4)).
    const rows = await usage(RAG_UPLOAD_ENDPOINT);
    expect(rows).toHaveLength(1);
    expect(Number(rows[0]?.input_tokens)).toBe(Math.ceil(text.length / 4));
    expect(Number(rows[0]?.cost_micros)).toBe(Math.ceil(text.length / 4));
    expect(rows[0]?.provider_status).toBe('success');
  });

  it('a permanent failure (400) is not retried: the document fails, nothing charged', async () => {
    ts.fake.scriptEmbeddings({ error: { status: 400, message: 'input too long' } });
    const before = (await usage(RAG_UPLOAD_ENDPOINT)).length;
    const res = await upload('bad.txt', 'An input the model refuses.');
    const body = await res.json();
    expect(body.results.details[0]).toMatchObject({ filename: 'bad.txt', status: 'failed' });
    expect(body.results.details[0].error).toContain('input too long');
    expect(embeddingRequests()).toHaveLength(1);
    const rows = await usage(RAG_UPLOAD_ENDPOINT);
    for (const r of rows.slice(before)) expect(Number(r.cost_micros)).toBe(0);
  });

  it('gives up after EMBEDDING_MAX_RETRIES retries', async () => {
    const err = { error: { status: 500, message: 'boom', type: 'server_error' }, retryAfter: '0' };
    ts.fake.scriptEmbeddings(err, err, err, err, err);
    const res = await upload('never.txt', 'A file the upstream never embeds.');
    const body = await res.json();
    expect(body.results.details[0]).toMatchObject({ filename: 'never.txt', status: 'failed' });
    // One attempt and three retries.
    expect(embeddingRequests()).toHaveLength(4);
  });

  it('the query embedding is retried and charged once', async () => {
    ts.fake.scriptEmbeddings({ error: { status: 502, message: 'bad gateway' }, retryAfter: '0' });
    const question = 'When is the lamp of the lighthouse cleaned?';
    const res = await ts.api('/rag/query', {
      method: 'POST',
      key: session.token,
      json: { query: question, workspace_id: ws.workspaceId, options: { confidence_threshold: 0 } },
    });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.usage.embedding_tokens).toBe(Math.ceil(question.length / 4));
    expect(embeddingRequests()).toHaveLength(2);
    const rows = await usage(RAG_QUERY_ENDPOINT);
    expect(rows).toHaveLength(1);
    expect(Number(rows[0]?.input_tokens)).toBe(Math.ceil(question.length / 4));
    expect(body.result.sources[0].content).toContain('lamp is cleaned');
  });
});
