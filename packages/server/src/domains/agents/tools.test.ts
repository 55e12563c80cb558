import {
  fakeSearchEnv,
  type HttpFixture,
  startFakeSearch,
  startHttpFixture,
  startTestMcpServer,
  type TestMcpServer,
} from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { createAgentWithSession, openTurn } from './test-helpers.js';

let ts: TestServer & { fake: FakeOpenAI };
let guarded: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let gws: TestWorkspace;
let site: HttpFixture;
let search: HttpFixture;
let mcp: TestMcpServer;

beforeAll(async () => {
  site = await startHttpFixture(() => ({
    headers: { 'content-type': 'text/html; charset=utf-8' },
    body: '<html><head><title>Fixture page</title><style>p{}</style></head><body><script>alert(1)</script><p>Hello &amp; welcome</p></body></html>',
  }));
  search = await startFakeSearch();
  mcp = await startTestMcpServer();
  ts = await startTestServerWithFakeModel({
    env: { OUTBOUND_ALLOWLIST: '127.0.0.1', RUN_POLL_INTERVAL_MS: '100', ...fakeSearchEnv(search) },
  });
  // No allowlist: the default outbound policy.
  guarded = await startTestServerWithFakeModel({ env: { RUN_POLL_INTERVAL_MS: '100' } });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  gws = await createTestWorkspace(guarded, { creditsUsd: '10' });
});
afterAll(async () => {
  await ts?.close();
  await guarded?.close();
  await site?.close();
  await search?.close();
  await mcp?.close();
});

const toolEvents = (events: { data: any }[]) => events.filter((e) => e.data.type.startsWith('tool_call.'));

describe('web_fetch', () => {
  it('refuses a loopback URL by default (SSRF guard)', async () => {
    const { sessionId } = await createAgentWithSession(guarded, gws.apiKey, {
      name: 'Fetcher',
      config: { capabilities: { tools: { web_fetch: true } } },
    });
    guarded.fake.script(
      {
        toolCalls: [{ id: 'f1', name: 'web_fetch', arguments: JSON.stringify({ url: `${site.url}/page` }) }],
      },
      { text: 'Could not fetch.' },
    );
    const before = site.requests.length;
    const events = await (await openTurn(guarded, gws.apiKey, sessionId, { message: 'fetch it' })).rest();
    const [started, completed] = toolEvents(events);
    expect(started?.data).toMatchObject({ type: 'tool_call.started', name: 'web_fetch' });
    expect(completed?.data).toMatchObject({
      status: 'error',
      error: expect.stringMatching(/private or reserved|Blocked/),
    });
    expect(site.requests.length).toBe(before);
    expect(events.at(-1)?.data.type).toBe('run.completed');
  });

  it('refuses metadata and private literal addresses', async () => {
    const { sessionId } = await createAgentWithSession(guarded, gws.apiKey, {
      name: 'Fetcher2',
      config: { capabilities: { tools: { web_fetch: true } } },
    });
    guarded.fake.script(
      {
        toolCalls: [
          { id: 'm1', name: 'web_fetch', arguments: '{"url":"http://169.254.169.254/latest/meta-data"}' },
          { id: 'm2', name: 'web_fetch', arguments: '{"url":"http://10.1.2.3/"}' },
          { id: 'm3', name: 'web_fetch', arguments: '{"url":"file:///etc/passwd"}' },
        ],
      },
      { text: 'no' },
    );
    const events = await (await openTurn(guarded, gws.apiKey, sessionId, { message: 'x' })).rest();
    const done = toolEvents(events).filter((e) => e.data.type === 'tool_call.completed');
    expect(done).toHaveLength(3);
    for (const d of done) expect(d.data.status).toBe('error');
  });

  it('fetches readable text when the operator allowlist permits the address', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Allowed',
      config: { capabilities: { tools: { web_fetch: true } } },
    });
    ts.fake.script(
      {
        toolCalls: [{ id: 'f2', name: 'web_fetch', arguments: JSON.stringify({ url: `${site.url}/page` }) }],
      },
      { text: 'Fetched.' },
    );
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'fetch it' })).rest();
    const completed = toolEvents(events).find((e) => e.data.type === 'tool_call.completed');
    expect(completed?.data.status).toBe('completed');
    expect(completed?.data.result.text).toBe('Fixture page\n\nHello & welcome');
    expect(completed?.data.result.text).not.toContain('alert');
  });

  it('is not offered when the toolAllowlist excludes it', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Restricted',
      config: {
        capabilities: { tools: { web_fetch: true, web_search: true } },
        toolAllowlist: ['web_search'],
      },
    });
    ts.fake.script({ text: 'ok' });
    await (await openTurn(ts, ws.apiKey, sessionId, { message: 'x' })).rest();
    const names = ts.fake.requests.at(-1)?.body.tools.map((t: any) => t.function.name);
    expect(names).toEqual(['web_search']);
  });
});

describe('web_search', () => {
  for (const [provider, expected] of [
    ['brave', ['Brave']],
    ['tavily', ['Tavily']],
    ['both', ['Brave', 'Tavily']],
  ] as const) {
    it(`searches through web_provider=${provider}`, async () => {
      const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
        name: `Search ${provider}`,
        config: { capabilities: { tools: { web_search: true, web_provider: provider } } },
      });
      ts.fake.script(
        { toolCalls: [{ id: 's1', name: 'web_search', arguments: '{"query":"pglite","maxResults":4}' }] },
        { text: 'Found.' },
      );
      const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'search' })).rest();
      const completed = toolEvents(events).find((e) => e.data.type === 'tool_call.completed');
      expect(completed?.data.status).toBe('completed');
      const results = completed?.data.result.results as { title: string }[];
      expect(results.length).toBeGreaterThan(0);
      expect(results.length).toBeLessThanOrEqual(4);
      const seen = new Set(results.map((r) => r.title.split(' ')[0]));
      expect([...seen].sort()).toEqual([...expected]);
      expect(results[0]?.title).toContain('pglite');
    });
  }
});

describe('MCP servers', () => {
  it('lists and calls the tools of a Streamable HTTP MCP server', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Mcp',
      config: { capabilities: { mcp_servers: [{ name: 'calc', url: mcp.url }] } },
    });
    ts.fake.script(
      {
        toolCalls: [
          { id: 'a1', name: 'calc__add', arguments: '{"a":2,"b":40}' },
          { id: 'a2', name: 'calc__fail', arguments: '{}' },
        ],
      },
      { text: 'The answer is 42.' },
    );
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'add' })).rest();
    const names = ts.fake.requests
      .at(-2)
      ?.body.tools.map((t: any) => t.function.name)
      .sort();
    expect(names).toEqual(['calc__add', 'calc__fail']);
    const types = events.map((e) => e.data.type);
    expect(types.slice(0, 5)).toEqual([
      'run.started',
      'tool_call.started',
      'tool_call.completed',
      'tool_call.started',
      'tool_call.completed',
    ]);
    expect(events[2]?.data).toMatchObject({ name: 'calc__add', status: 'completed', result: '42' });
    expect(events[4]?.data).toMatchObject({
      name: 'calc__fail',
      status: 'error',
      error: 'this tool always fails',
    });
    expect(mcp.calls.map((c) => c.name)).toEqual(['add', 'fail']);
    expect(types.at(-1)).toBe('run.completed');
  });
});

describe('memory', () => {
  it('with memory off, a turn sees only its own message', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Forgetful' });
    ts.fake.script({ text: 'one' }, { text: 'two' });
    await (await openTurn(ts, ws.apiKey, sessionId, { message: 'first' })).rest();
    await (await openTurn(ts, ws.apiKey, sessionId, { message: 'second' })).rest();
    expect(ts.fake.requests.at(-1)?.body.messages).toEqual([{ role: 'user', content: 'second' }]);
  });

  it('with memory on, turns see the session history and saved notes of the scope', async () => {
    const { agentId, sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Remembers',
      config: { capabilities: { memory: { enabled: true, scope: 'agent' } } },
    });
    ts.fake.script(
      { toolCalls: [{ id: 'm1', name: 'memory_save', arguments: '{"content":"The user likes tea"}' }] },
      { text: 'Noted.' },
      { text: 'You said first.' },
    );
    await (await openTurn(ts, ws.apiKey, sessionId, { message: 'first' })).rest();
    await (await openTurn(ts, ws.apiKey, sessionId, { message: 'second' })).rest();
    const msgs = ts.fake.requests.at(-1)?.body.messages;
    expect(msgs[0].role).toBe('system');
    expect(msgs[0].content).toContain('The user likes tea');
    expect(msgs.slice(1)).toEqual([
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'Noted.' },
      { role: 'user', content: 'second' },
    ]);

    // another session of the same agent sees the agent-scoped note, not the history
    const s2 = await ts.api(`/managed-agents/agents/${agentId}/sessions`, {
      method: 'POST',
      key: ws.apiKey,
      json: {},
    });
    const session2 = ((await s2.json()) as any).session.id;
    ts.fake.script({ text: 'hi' });
    await (await openTurn(ts, ws.apiKey, session2, { message: 'hello' })).rest();
    const msgs2 = ts.fake.requests.at(-1)?.body.messages;
    expect(msgs2[0].content).toContain('The user likes tea');
    expect(msgs2.slice(1)).toEqual([{ role: 'user', content: 'hello' }]);

    // a different agent (agent scope) does not
    const { sessionId: s3 } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Stranger',
      config: { capabilities: { memory: { enabled: true } } },
    });
    ts.fake.script({ text: 'hi' });
    await (await openTurn(ts, ws.apiKey, s3, { message: 'hello' })).rest();
    expect(ts.fake.requests.at(-1)?.body.messages).toEqual([{ role: 'user', content: 'hello' }]);
  });
});
