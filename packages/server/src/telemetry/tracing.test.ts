import {
  type HttpFixture,
  OTLP_SPAN_KIND,
  type OtlpReceiver,
  type ReceivedSpan,
  startHttpFixture,
  startOtlpReceiver,
} from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAgentWithSession, openTurn } from '../domains/agents/test-helpers.js';
import {
  createTestDatabase,
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestDatabase,
  type TestServer,
  type TestWorkspace,
} from '../test/harness.js';
import { tracingConfigFromEnv } from './config.js';
import { instrumentListener } from './http.js';
import { inRunSpan } from './runs.js';
import { flushTracing, stopTracing } from './sdk.js';
import { inSpan, traceLogFields, tracer } from './tracing.js';

let receiver: OtlpReceiver;
let callbacks: HttpFixture;
let db: TestDatabase;

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  callbacks = await startHttpFixture(() => ({ body: { result: { temperature: 21 } } }), {
    requireContentLength: true,
  });
  db = await createTestDatabase();
}, 120_000);

afterAll(async () => {
  await stopTracing();
  await receiver?.close();
  await callbacks?.close();
  await db?.drop();
});

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT_ID = '00f067aa0ba902b7';

async function serverWith(env: Record<string, string>): Promise<TestServer & { fake: FakeOpenAI }> {
  return startTestServerWithFakeModel({
    db,
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      RUN_POLL_INTERVAL_MS: '100',
      OUTBOUND_ALLOWLIST: '127.0.0.1',
      ...env,
    },
  });
}

const byId = (spans: ReceivedSpan[], id: string) => spans.find((s) => s.spanId === id);

describe('OTLP/HTTP JSON: a /chat request', () => {
  let ts: TestServer & { fake: FakeOpenAI };
  let ws: TestWorkspace;
  beforeAll(async () => {
    ts = await serverWith({
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_SERVICE_NAME: 'suite-under-test',
    });
    ws = await createTestWorkspace(ts, { creditsUsd: '1' });
  }, 120_000);
  afterAll(async () => {
    await ts?.close();
  });

  it('continues the incoming traceparent: server span, GenAI client span, pg spans; the upstream gets the trace', async () => {
    receiver.clear();
    ts.fake.script({ text: 'Traced reply.', usage: { prompt_tokens: 13, completion_tokens: 4 } });
    const res = await ts.api('/chat', {
      method: 'POST',
      key: ws.apiKey,
      headers: { traceparent: `00-${TRACE_ID}-${PARENT_ID}-01` },
      json: { model: 'fake-chat', messages: [{ role: 'user', content: 'secret prompt text' }] },
    });
    expect(res.status).toBe(200);
    await res.text();
    await flushTracing();
    const spans = await receiver.waitFor((all) =>
      all.some((s) => s.traceId === TRACE_ID && s.kind === OTLP_SPAN_KIND.SERVER),
    );
    expect(receiver.contentTypes).toContain('application/json');
    const trace = spans.filter((s) => s.traceId === TRACE_ID);
    const server = trace.find((s) => s.kind === OTLP_SPAN_KIND.SERVER) as ReceivedSpan;
    expect(server.name).toBe('POST /api/v1/chat');
    expect(server.parentSpanId).toBe(PARENT_ID);
    expect(server.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/api/v1/chat',
      'http.response.status_code': 200,
    });
    expect(server.resource['service.name']).toBe('suite-under-test');
    const chat = trace.find((s) => s.name === 'chat fake-chat') as ReceivedSpan;
    expect(chat).toBeDefined();
    expect(chat.kind).toBe(OTLP_SPAN_KIND.CLIENT);
    expect(chat.parentSpanId).toBe(server.spanId);
    expect(chat.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'fake-chat',
      'gen_ai.response.model': 'fake-chat',
      'gen_ai.usage.input_tokens': 13,
      'gen_ai.usage.output_tokens': 4,
      'gen_ai.response.finish_reasons': ['stop'],
    });
    // Content is captured only when asked.
    expect(chat.attributes['gen_ai.input.messages']).toBeUndefined();
    expect(JSON.stringify(trace)).not.toContain('secret prompt text');
    // The upstream received the trace, with the GenAI span as its parent.
    const upstream = ts.fake.requests.findLast((r) => r.path.endsWith('/chat/completions'));
    expect(upstream?.headers.traceparent).toBe(`00-${TRACE_ID}-${chat.spanId}-01`);
    // Database spans, under the request.
    const pg = trace.filter((s) => s.name.startsWith('pg.query:'));
    expect(pg.length).toBeGreaterThan(0);
    for (const s of pg) {
      expect(s.kind).toBe(OTLP_SPAN_KIND.CLIENT);
      expect(s.attributes['db.system.name']).toBe('postgresql');
      // The summary, never the statement text.
      expect(s.attributes['db.query.summary']).toMatch(/^[A-Z]+/);
      expect(s.attributes['db.query.text']).toBeUndefined();
      expect(byId(trace, s.parentSpanId)).toBeDefined();
    }
  });

  it('makes no span in a trace its caller did not sample, and still passes the trace on', async () => {
    receiver.clear();
    const unsampled = '0af7651916cd43dd8448eb211c80319c';
    ts.fake.script({ text: 'Untraced reply.', usage: { prompt_tokens: 5, completion_tokens: 2 } });
    const res = await ts.api('/chat', {
      method: 'POST',
      key: ws.apiKey,
      headers: { traceparent: `00-${unsampled}-${PARENT_ID}-00` },
      json: { model: 'fake-chat', messages: [{ role: 'user', content: 'hello' }] },
    });
    expect(res.status).toBe(200);
    await res.text();
    const upstream = ts.fake.requests.findLast((r) => r.path.endsWith('/chat/completions'));
    expect(upstream?.headers.traceparent).toMatch(new RegExp(`^00-${unsampled}-[0-9a-f]{16}-00$`));
    // A sampled request after it: once its spans are in, the unsampled one's would be too.
    const sampled = '5bf92f3577b34da6a3ce929d0e0e4736';
    ts.fake.script({ text: 'Traced reply.', usage: { prompt_tokens: 5, completion_tokens: 2 } });
    const res2 = await ts.api('/chat', {
      method: 'POST',
      key: ws.apiKey,
      headers: { traceparent: `00-${sampled}-${PARENT_ID}-01` },
      json: { model: 'fake-chat', messages: [{ role: 'user', content: 'hello' }] },
    });
    await res2.text();
    await flushTracing();
    const spans = await receiver.waitFor((all) =>
      all.some((s) => s.traceId === sampled && s.kind === OTLP_SPAN_KIND.SERVER),
    );
    expect(spans.some((s) => s.traceId === sampled && s.name.startsWith('pg.query:'))).toBe(true);
    expect(spans.filter((s) => s.traceId === unsampled)).toEqual([]);
  });

  it('starts a new trace without a traceparent and marks an upstream failure on the GenAI span', async () => {
    receiver.clear();
    ts.fake.script({ error: { status: 400, message: 'upstream refused' } });
    const res = await ts.api('/chat', {
      method: 'POST',
      key: ws.apiKey,
      json: { model: 'fake-chat', messages: [{ role: 'user', content: 'hello' }] },
    });
    await res.text();
    await flushTracing();
    const spans = await receiver.waitFor((all) => all.some((s) => s.name === 'chat fake-chat'));
    const chat = spans.find((s) => s.name === 'chat fake-chat') as ReceivedSpan;
    const server = byId(spans, chat.parentSpanId) as ReceivedSpan;
    expect(server.kind).toBe(OTLP_SPAN_KIND.SERVER);
    expect(server.parentSpanId).toBe('');
    expect(res.status).toBe(502);
    expect(chat.status.code).toBe(2);
    expect(chat.attributes['error.type']).toBe('502');
  });
});

describe('OTLP/HTTP protobuf: an agent turn', () => {
  let ts: TestServer & { fake: FakeOpenAI };
  let ws: TestWorkspace;
  beforeAll(async () => {
    ts = await serverWith({
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true',
    });
    ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  }, 120_000);
  afterAll(async () => {
    await ts?.close();
  });

  it('is one trace: SSE request, the run, both model calls and the callback tool; the callback gets the trace', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Traced',
      config: { customTools: [{ name: 'get_weather', callbackUrl: `${callbacks.url}/hook` }] },
    });
    receiver.clear();
    ts.fake.script(
      { toolCalls: [{ id: 't1', name: 'get_weather', arguments: '{"city":"Oslo"}' }] },
      { text: 'It is 21 degrees.' },
    );
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Weather in Oslo?' });
    const events = await turn.rest();
    expect(events.at(-1)?.data.type).toBe('run.completed');
    await flushTracing();
    const spans = await receiver.waitFor(
      (all) =>
        all.filter((s) => s.name === 'chat fake-chat').length >= 2 &&
        all.some((s) => s.name === 'invoke_agent'),
    );
    expect(receiver.contentTypes).toContain('application/x-protobuf');
    const server = spans.find(
      (s) =>
        s.kind === OTLP_SPAN_KIND.SERVER &&
        s.attributes['http.route'] === '/api/v1/managed-agents/sessions/{sessionId}/messages',
    ) as ReceivedSpan;
    expect(server).toBeDefined();
    const trace = spans.filter((s) => s.traceId === server.traceId);
    const run = trace.find((s) => s.name === 'invoke_agent') as ReceivedSpan;
    expect(run).toBeDefined();
    expect(run.parentSpanId).toBe(server.spanId);
    expect(run.attributes['aisuite.run.kind']).toBe('turn');
    const chats = trace.filter((s) => s.name === 'chat fake-chat');
    expect(chats).toHaveLength(2);
    for (const c of chats) expect(c.parentSpanId).toBe(run.spanId);
    const tool = trace.find((s) => s.name === 'execute_tool get_weather') as ReceivedSpan;
    expect(tool).toBeDefined();
    expect(tool.parentSpanId).toBe(run.spanId);
    expect(tool.attributes).toMatchObject({
      'gen_ai.tool.name': 'get_weather',
      'gen_ai.tool.type': 'callback',
    });
    // Content capture is on here: the prompt is on the GenAI span.
    expect(String(chats[0]?.attributes['gen_ai.input.messages'])).toContain('Weather in Oslo?');
    // The callback request continues the trace under the tool span.
    const hook = callbacks.requests.findLast((r) => r.path === '/hook');
    expect(hook?.headers.traceparent).toBe(`00-${server.traceId}-${tool.spanId}-01`);
  });

  it('an execution in another context continues the trace stored on the run', async () => {
    const stored = `00-${TRACE_ID}-${PARENT_ID}-01`;
    receiver.clear();
    await inRunSpan({ id: 'r', kind: 'autonomous', attempts: 2, traceParent: stored }, async () => {
      await inSpan('step', {}, async () => {});
    });
    await flushTracing();
    const spans = await receiver.waitFor((all) => all.some((s) => s.name === 'invoke_agent'));
    const run = spans.find((s) => s.name === 'invoke_agent') as ReceivedSpan;
    expect(run.traceId).toBe(TRACE_ID);
    expect(run.parentSpanId).toBe(PARENT_ID);
    expect(run.attributes['aisuite.run.attempt']).toBe(2);
    expect(spans.find((s) => s.name === 'step')?.parentSpanId).toBe(run.spanId);
  });

  it('log lines written inside a span carry its trace_id and span_id', async () => {
    expect(traceLogFields()).toEqual({});
    await inSpan('logged', {}, async (span) => {
      const c = span?.spanContext();
      expect(traceLogFields()).toEqual({ trace_id: c?.traceId, span_id: c?.spanId });
    });
  });
});

describe('off', () => {
  it('reads only the standard variables; no endpoint, none exporter or SDK disabled is off', () => {
    expect(tracingConfigFromEnv({})).toBeUndefined();
    expect(
      tracingConfigFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x:4318', OTEL_SDK_DISABLED: 'true' }),
    ).toBeUndefined();
    expect(
      tracingConfigFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x:4318', OTEL_TRACES_EXPORTER: 'none' }),
    ).toBeUndefined();
    expect(tracingConfigFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x:4318/' })).toMatchObject({
      url: 'http://x:4318/v1/traces',
      protocol: 'http/protobuf',
      serviceName: 'ai-suite',
      sampler: 'parentbased_always_on',
    });
    expect(
      tracingConfigFromEnv({
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://y/traces',
        OTEL_EXPORTER_OTLP_HEADERS: 'a=b%20c,x=y',
        OTEL_TRACES_SAMPLER: 'traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.25',
      }),
    ).toMatchObject({
      url: 'http://y/traces',
      headers: { a: 'b c', x: 'y' },
      sampler: 'traceidratio',
      samplerArg: '0.25',
    });
    expect(() =>
      tracingConfigFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }),
    ).toThrow(/http\/protobuf or http\/json/);
  });

  it('leaves the request listener as it is when neither metrics nor tracing is on', async () => {
    await stopTracing();
    expect(tracer).toBeUndefined();
    const listener = () => {};
    expect(instrumentListener(listener, () => 'x')).toBe(listener);
  });
});
