import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  creditBalance,
  type FakeOpenAI,
  startTestServer,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let appId: string;

const json = async <T = any>(res: Response): Promise<T> => (await res.json()) as T;
const generate = (body: unknown, key = ws.apiKey) =>
  ts.api('/artifacts/generate', { method: 'POST', key, json: body });

const words = (n: number) => Array.from({ length: n }, (_, i) => `word${i}`).join(' ');
/** A reply that validates: 150 words of summary, one insight with 14 evidence items. */
const report = (over: Record<string, unknown> = {}) => ({
  executiveSummary: words(150),
  insights: [
    {
      title: 'Adoption doubled',
      body: 'Active users went from 40 to 80.',
      category: 'key_development',
      evidence: Array.from({ length: 14 }, (_, i) => `e${i}`),
    },
  ],
  followUpConsiderations: [
    { title: 'Check churn', body: 'Watch the next cycle.', attentionLevel: 'moderate' },
  ],
  confidenceNotes: 'Based on 3 samples.',
  ...over,
});
const body = (over: Record<string, unknown> = {}) => ({
  scope: { level: 'organization', entityId: 'org-1', label: 'Acme' },
  input: {
    aggregates: {
      recordCount: 120,
      metrics: { activeUsers: 80, growth: '2x', flagged: false, missing: null },
      breakdowns: [
        {
          dimension: 'region',
          rows: [
            { key: 'EU', count: 50 },
            { key: 'US', count: 70, value: 1.5 },
          ],
        },
      ],
    },
    samples: [
      { id: 's1', fields: { note: 'y'.repeat(1000), nested: { a: 1 } } },
      { fields: { note: 'short' } },
    ],
    context: { instructions: 'Focus on adoption.', locale: 'en-GB', audienceProfile: 'board' },
  },
  period: { start: '2026-10-01', end: '2026-10-31' },
  externalRef: 'invoice-77',
  ...over,
});
const balance = (workspaceId: string) => creditBalance(ts, workspaceId);

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  const res = await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'Reports' } });
  appId = (await json(res)).app.id;
});
afterAll(() => ts?.close());

describe('POST /artifacts/generate', () => {
  it('returns the report, its usage and meta; the model got the payload with samples cut at 800 characters', async () => {
    ts.fake.reset();
    ts.fake.script({
      text: JSON.stringify(report()),
      usage: { prompt_tokens: 3000, completion_tokens: 500 },
    });
    const before = await balance(ws.workspaceId);
    const res = await generate(body({ appId }));
    expect(res.status).toBe(200);
    const out = await json(res);
    expect(out.meta).toEqual({
      requestId: expect.any(String),
      persisted: true,
      workflowRunId: expect.any(String),
    });
    expect(res.headers.get('x-request-id')).toBe(out.meta.requestId);
    expect(out.data.templateId).toBe('insight-narrative-v1');
    // fake-chat: $1 / $2 per million tokens → 3000 + 1000 micros.
    expect(out.data.usage).toEqual({
      model: 'fake-chat',
      inputTokens: 3000,
      outputTokens: 500,
      costUsd: 0.004,
      providerSlug: 'default',
    });
    const snap = out.data.outputSnapshot;
    expect(snap).toMatchObject({
      version: 1,
      templateId: 'insight-narrative-v1',
      scope: { level: 'organization', entityId: 'org-1', label: 'Acme' },
      period: { start: '2026-10-01', end: '2026-10-31' },
      source: { type: 'customer_payload', recordCount: 120, sampleCount: 2 },
    });
    expect(Number.isNaN(Date.parse(snap.generatedAt))).toBe(false);
    expect(snap.llm.executiveSummary).toBe(words(150));
    expect(snap.llm.insights[0].evidence).toHaveLength(12); // spec 8: 12 per insight
    expect(snap.llm.followUpConsiderations[0].attentionLevel).toBe('moderate');
    expect(await balance(ws.workspaceId)).toBe(before - 4000);

    const sent = ts.fake.requests.find((r) => r.path.endsWith('/chat/completions'))?.body;
    expect(sent.response_format).toMatchObject({
      type: 'json_schema',
      json_schema: { name: 'insight_report', strict: true },
    });
    expect(sent.messages[0].content).toContain('Focus on adoption.');
    expect(sent.messages[0].content).toContain('en-GB');
    const payload = JSON.parse(sent.messages[1].content);
    expect(payload.samples[0].fields.note).toBe(`${'y'.repeat(800)}…`);
    expect(payload.samples[0].fields.nested).toBe('{"a":1}');
    expect(payload.aggregates.metrics).toEqual({
      activeUsers: 80,
      growth: '2x',
      flagged: false,
      missing: null,
    });

    const em = ts.server.deps.em();
    const [stored] = await em.execute<any[]>('select * from artifact_reports where id = ?', [
      out.meta.workflowRunId,
    ]);
    expect(stored).toMatchObject({
      workspace_id: ws.workspaceId,
      app_id: appId,
      request_id: out.meta.requestId,
      template_id: 'insight-narrative-v1',
      external_ref: 'invoice-77',
      model: 'fake-chat',
    });
    expect(Number(stored.cost_micros)).toBe(4000);
    const usage = await em.execute<any[]>('select * from usage_records where request_id = ?', [
      out.meta.requestId,
    ]);
    expect(usage).toHaveLength(1);
    expect(usage[0]).toMatchObject({ endpoint: '/artifacts/generate', meter: 'credits', app_id: appId });
    expect(Number(usage[0].cost_micros)).toBe(4000);
  });

  it('uses the second template when asked, and the model override', async () => {
    ts.fake.reset();
    ts.fake.script({ text: JSON.stringify(report()), usage: { prompt_tokens: 10, completion_tokens: 10 } });
    const res = await generate(body({ templateId: 'insight-brief-v1', model: 'fake-chat' }));
    expect(res.status).toBe(200);
    expect((await json(res)).data.templateId).toBe('insight-brief-v1');
    expect(ts.fake.requests[0]?.body.messages[0].content).toContain('at most three insights');
  });

  it('asks once more when the reply does not validate, and charges both calls', async () => {
    ts.fake.reset();
    ts.fake.script(
      {
        text: JSON.stringify(report({ executiveSummary: 'Too short.' })),
        usage: { prompt_tokens: 100, completion_tokens: 10 },
      },
      { text: JSON.stringify(report()), usage: { prompt_tokens: 200, completion_tokens: 300 } },
    );
    const res = await generate(body());
    expect(res.status).toBe(200);
    const out = await json(res);
    expect(out.data.usage).toMatchObject({ inputTokens: 300, outputTokens: 310 });
    const repair = ts.fake.requests[1]?.body.messages;
    expect(repair.at(-2)).toMatchObject({ role: 'assistant' });
    expect(repair.at(-1).content).toContain('executiveSummary must be 120 to 400 words');
  });

  it('500 when the repaired reply is still not a report; the calls are still charged and nothing is stored', async () => {
    ts.fake.reset();
    ts.fake.script(
      { text: 'not json', usage: { prompt_tokens: 100, completion_tokens: 10 } },
      {
        text: JSON.stringify(
          report({ insights: [{ title: '', body: 'b', category: 'other', evidence: [] }] }),
        ),
        usage: { prompt_tokens: 100, completion_tokens: 10 },
      },
    );
    const before = await balance(ws.workspaceId);
    const stored = async () =>
      Number(
        (await ts.server.deps.em().execute<{ n: string }[]>('select count(*) as n from artifact_reports'))[0]
          ?.n,
      );
    const count = await stored();
    const res = await generate(body());
    expect(res.status).toBe(500);
    expect(await json(res)).toEqual({
      error: 'Failed to generate report: the model did not return a valid report',
    });
    expect(await balance(ws.workspaceId)).toBe(before - 240);
    expect(await stored()).toBe(count);
  });

  it('400 INVALID_INPUT for each rule of the body', async () => {
    const long = (n: number) => 'x'.repeat(n);
    const cases: [Record<string, unknown>, string][] = [
      [{ scope: undefined }, 'scope is required'],
      [{ scope: { level: 'planet' } }, 'scope.level must be one of: organization, network, item'],
      [{ scope: { level: 'item', entityId: long(257) } }, 'scope.entityId must be 256 characters or less'],
      [{ scope: { level: 'item', label: long(501) } }, 'scope.label must be 500 characters or less'],
      [{ input: undefined }, 'input is required'],
      [{ input: {} }, 'input.aggregates is required'],
      [
        { input: { aggregates: { metrics: { a: [1] } } } },
        'input.aggregates.metrics values must be a string, number, boolean or null',
      ],
      [
        {
          input: {
            aggregates: { breakdowns: Array.from({ length: 21 }, () => ({ dimension: 'd', rows: [] })) },
          },
        },
        'input.aggregates.breakdowns has at most 20 items',
      ],
      [
        {
          input: {
            aggregates: {
              breakdowns: [{ dimension: 'd', rows: Array.from({ length: 101 }, () => ({ key: 'k' })) }],
            },
          },
        },
        'a breakdown has at most 100 rows',
      ],
      [
        { input: { aggregates: {}, samples: Array.from({ length: 61 }, () => ({})) } },
        'input.samples has at most 60 items',
      ],
      [
        {
          input: {
            aggregates: {},
            samples: [{ fields: Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`k${i}`, i])) }],
          },
        },
        'a sample has at most 20 fields',
      ],
      [
        { input: { aggregates: {}, context: { instructions: long(4001) } } },
        'input.context.instructions must be 4000 characters or less',
      ],
      [
        { input: { aggregates: {}, context: { locale: long(33) } } },
        'input.context.locale must be 32 characters or less',
      ],
      [
        { input: { aggregates: {}, context: { audienceProfile: long(65) } } },
        'input.context.audienceProfile must be 64 characters or less',
      ],
      [{ period: { start: long(33) } }, 'period.start must be 32 characters or less'],
      [{ period: { end: long(33) } }, 'period.end must be 32 characters or less'],
      [{ externalRef: long(257) }, 'externalRef must be 256 characters or less'],
      [{ model: long(201) }, 'model must be 200 characters or less'],
      [{ templateId: 'nope' }, 'Unknown templateId "nope". Known: insight-narrative-v1, insight-brief-v1'],
      [{ model: 'no-such-model' }, 'Invalid model'],
    ];
    ts.fake.reset();
    for (const [over, error] of cases) {
      const res = await generate(body(over));
      expect(res.status, error).toBe(400);
      const out = await json(res);
      expect(out.error, JSON.stringify(over).slice(0, 80)).toBe(error);
      expect(out.code).toBe('INVALID_INPUT');
    }
    expect(ts.fake.requests).toHaveLength(0);
  });

  it('400 INVALID_INPUT for a body over 512,000 bytes, malformed JSON or another content type', async () => {
    const big = body({ input: { aggregates: { metrics: { blob: 'z'.repeat(512_000) } } } });
    for (const payload of [
      big,
      { ...big, input: { aggregates: { metrics: { blob: 'z'.repeat(3_000_000) } } } },
    ]) {
      const res = await generate(payload);
      expect(res.status).toBe(400);
      expect(await json(res)).toEqual({
        error: 'The request body exceeds 512000 bytes',
        code: 'INVALID_INPUT',
      });
    }
    const exact = JSON.stringify(body()).length;
    const fits = body({ externalRef: 'r' });
    (fits.input.aggregates.metrics as Record<string, unknown>).pad = 'p'.repeat(512_000 - exact - 40);
    expect(Buffer.byteLength(JSON.stringify(fits))).toBeLessThanOrEqual(512_000);
    ts.fake.script({ text: JSON.stringify(report()) });
    expect((await generate(fits)).status).toBe(200);

    const bad = await ts.api('/artifacts/generate', {
      method: 'POST',
      key: ws.apiKey,
      body: '{"scope":',
      headers: { 'content-type': 'application/json' },
    });
    expect(bad.status).toBe(400);
    expect(await json(bad)).toMatchObject({ code: 'INVALID_INPUT' });
    const form = await ts.api('/artifacts/generate', {
      method: 'POST',
      key: ws.apiKey,
      body: 'a=b',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(form.status).toBe(400);
    expect(await json(form)).toMatchObject({ code: 'INVALID_INPUT' });
  });

  it('404 APP_NOT_FOUND for an app of another workspace or none; 401 without a valid key; 402 without credits', async () => {
    const other = await createTestWorkspace(ts, { creditsUsd: '1' });
    for (const id of [randomUUID(), 'not-a-uuid', appId]) {
      const res = await generate(body({ appId: id }), other.apiKey);
      expect(res.status, id).toBe(404);
      expect(await json(res)).toEqual({ error: 'App not found in this workspace', code: 'APP_NOT_FOUND' });
    }
    const noKey = await ts.api('/artifacts/generate', { method: 'POST', json: body() });
    expect(noKey.status).toBe(401);
    expect(await json(noKey)).toEqual({ error: 'Invalid API key' });

    const broke = await createTestWorkspace(ts);
    ts.fake.reset();
    const res = await generate(body(), broke.apiKey);
    expect(res.status).toBe(402);
    expect(await json(res)).toEqual({
      error: 'Insufficient credits. Please purchase additional credits to continue.',
      code: 'INSUFFICIENT_CREDITS',
    });
    expect(ts.fake.requests).toHaveLength(0);
  });

  it('aborts the model call when the caller goes away, and records the request as aborted', async () => {
    ts.fake.reset();
    ts.fake.script({ text: JSON.stringify(report()), delayMs: 5000 });
    const ac = new AbortController();
    const pending = ts.api('/artifacts/generate', {
      method: 'POST',
      key: ws.apiKey,
      json: body(),
      headers: { 'x-request-id': 'artifact-gone-1' },
      signal: ac.signal,
    });
    await ts.fake.waitForRequests(1);
    ac.abort();
    await expect(pending).rejects.toThrow();
    await expect.poll(() => ts.fake.requests[0]?.aborted).toBe(true);
    const row = async () =>
      (
        await ts.server.deps
          .em()
          .execute<{ provider_status: string }[]>(
            'select provider_status from usage_records where request_id = ?',
            ['artifact-gone-1'],
          )
      )[0];
    await expect.poll(async () => (await row())?.provider_status).toBe('aborted');
  });

  it('502 when the model fails', async () => {
    ts.fake.reset();
    ts.fake.script({ error: { status: 400, message: 'context length exceeded' } });
    const res = await generate(body());
    expect(res.status).toBe(502);
    expect((await json(res)).error).toBe('AI model error: context length exceeded');
  });
});

describe('without a model', () => {
  it('503 No AI model configured', async () => {
    const bare = await startTestServer();
    try {
      const w = await createTestWorkspace(bare, { creditsUsd: '1' });
      const res = await bare.api('/artifacts/generate', { method: 'POST', key: w.apiKey, json: body() });
      expect(res.status).toBe(503);
      expect(await json(res)).toEqual({ error: 'No AI model configured' });
    } finally {
      await bare.close();
    }
  });
});
