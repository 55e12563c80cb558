import { startTestMcpServer, type TestMcpServer } from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestSession,
  createTestWorkspace,
  startTestServer,
  startTestServerWithFakeModel,
  type TestServer,
  type TestSession,
  type TestWorkspace,
} from '../../test/harness.js';
import { createAgentWithSession, openTurn } from '../agents/test-helpers.js';

const SECRET = 'Bearer mcp-secret-123';
let ts: Awaited<ReturnType<typeof startTestServerWithFakeModel>>;
let guarded: TestServer;
let mcp: TestMcpServer;
let locked: TestMcpServer;
let ws: TestWorkspace;
let other: TestWorkspace;
let owner: TestSession;
let member: TestSession;
beforeAll(async () => {
  mcp = await startTestMcpServer();
  locked = await startTestMcpServer(undefined, { requireHeader: { name: 'Authorization', value: SECRET } });
  ts = await startTestServerWithFakeModel({
    env: { OUTBOUND_ALLOWLIST: '127.0.0.1', RUN_POLL_INTERVAL_MS: '100' },
  });
  // The default outbound policy (loopback refused), on a database of its own: two servers on
  // one database share the run queue, and this one has no model.
  guarded = await startTestServer();
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  other = await createTestWorkspace(ts);
  owner = await createTestSession(ts, ws, { role: 'owner' });
  member = await createTestSession(ts, ws, { role: 'member' });
});
afterAll(async () => {
  await guarded?.close();
  await ts?.close();
  await mcp?.close();
  await locked?.close();
});

const base = (workspaceId = ws.workspaceId, suffix = '') =>
  `/workspaces/${workspaceId}/tool-servers${suffix}`;
interface ToolServer {
  id: string;
  name: string;
  url: string;
  enabled: boolean;
  authHeaderName: string | null;
  tools: { name: string; description: string | null }[];
}
const connect = (key: string, json: unknown, server: TestServer = ts, workspaceId = ws.workspaceId) =>
  server.api(base(workspaceId), { method: 'POST', key, json });

describe('tool-server connections', () => {
  it('connects over MCP, records the tool list, stores the auth header encrypted', async () => {
    const res = await connect(owner.token, {
      name: 'calc',
      url: locked.url,
      authHeader: { value: SECRET },
    });
    expect(res.status).toBe(201);
    const { toolServer } = (await res.json()) as { toolServer: ToolServer };
    expect(toolServer).toMatchObject({
      name: 'calc',
      url: locked.url,
      enabled: true,
      authHeaderName: 'Authorization',
    });
    expect(toolServer.tools.map((t) => t.name).sort()).toEqual(['add', 'fail']);
    expect(JSON.stringify(toolServer)).not.toContain('mcp-secret');
    const [row] = await ts.server.deps
      .em()
      .execute<{ auth_header_secret: string }[]>('select auth_header_secret from tool_servers where id = ?', [
        toolServer.id,
      ]);
    expect(row?.auth_header_secret).toMatch(/^v1\./);
    expect(row?.auth_header_secret).not.toContain('mcp-secret');

    const listed = await ts.api(base(), { key: member.token });
    expect(listed.status).toBe(200);
    expect(((await listed.json()) as { toolServers: ToolServer[] }).toolServers.map((t) => t.id)).toContain(
      toolServer.id,
    );
  });

  it('refuses a server that does not speak MCP or refuses the credentials', async () => {
    const wrong = await connect(owner.token, { name: 'nokey', url: locked.url });
    expect(wrong.status).toBe(400);
    expect(((await wrong.json()) as { code: string }).code).toBe('TOOL_SERVER_UNREACHABLE');
    const notMcp = await connect(owner.token, { name: 'notmcp', url: `${ts.url}/api/v1/integration-packs` });
    expect(notMcp.status).toBe(400);
    expect(((await notMcp.json()) as { code: string }).code).toBe('TOOL_SERVER_UNREACHABLE');
  });

  it('applies the SSRF guard to the URL', async () => {
    const gws = await createTestWorkspace(guarded);
    const o = await createTestSession(guarded, gws, { role: 'owner' });
    for (const url of [
      mcp.url,
      'http://169.254.169.254/mcp',
      'http://[::ffff:127.0.0.1]/mcp',
      'file:///etc/passwd',
    ]) {
      const res = await connect(o.token, { name: 'blocked', url }, guarded, gws.workspaceId);
      expect(res.status, url).toBe(400);
      expect(((await res.json()) as { code: string }).code).toBe('URL_NOT_ALLOWED');
    }
    expect(mcp.calls).toHaveLength(0);
  });

  it('validates names and refuses duplicates', async () => {
    expect((await connect(owner.token, { name: 'bad name!', url: mcp.url })).status).toBe(400);
    const first = await connect(owner.token, { name: 'dup', url: mcp.url });
    expect(first.status).toBe(201);
    const second = await connect(owner.token, { name: 'DUP', url: mcp.url });
    expect(second.status).toBe(409);
    expect(((await second.json()) as { code: string }).code).toBe('TOOL_SERVER_NAME_TAKEN');
  });

  it('lets only owners and admins connect, toggle and disconnect; API keys get 401', async () => {
    const forbidden = { error: 'Insufficient permissions to manage tool servers' };
    const c = await connect(member.token, { name: 'm', url: mcp.url });
    expect(c.status).toBe(403);
    expect(await c.json()).toEqual(forbidden);
    const created = (await (await connect(owner.token, { name: 'perm', url: mcp.url })).json()) as {
      toolServer: ToolServer;
    };
    const id = created.toolServer.id;
    const t = await ts.api(base(ws.workspaceId, `/${id}`), {
      method: 'PATCH',
      key: member.token,
      json: { enabled: false },
    });
    expect(t.status).toBe(403);
    const d = await ts.api(base(ws.workspaceId, `/${id}`), { method: 'DELETE', key: member.token });
    expect(d.status).toBe(403);
    for (const [method, path] of [
      ['GET', base()],
      ['POST', base()],
      ['PATCH', base(ws.workspaceId, `/${id}`)],
      ['DELETE', base(ws.workspaceId, `/${id}`)],
    ] as const) {
      const res = await ts.api(path, { method, key: ws.apiKey, ...(method === 'GET' ? {} : { json: {} }) });
      expect(res.status, `${method} ${path}`).toBe(401);
      expect(await res.json()).toEqual({ error: 'Authentication required' });
    }
    // Another workspace's session cannot reach it, through its own path or this one.
    const stranger = await createTestSession(ts, other, { role: 'owner' });
    const foreign = await ts.api(base(other.workspaceId, `/${id}`), {
      method: 'DELETE',
      key: stranger.token,
    });
    expect(foreign.status).toBe(404);
    expect(await foreign.json()).toEqual({ error: 'Tool server not found' });
    expect(
      (await ts.api(base(ws.workspaceId, `/${id}`), { method: 'DELETE', key: stranger.token })).status,
    ).toBe(403);
  });

  it('offers a referenced server’s tools to agent turns until it is disabled or disconnected', async () => {
    const { toolServer } = (await (
      await connect(owner.token, { name: 'agentcalc', url: locked.url, authHeader: { value: SECRET } })
    ).json()) as { toolServer: ToolServer };
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Uses connected',
      config: { capabilities: { mcp_servers: [{ toolServerId: toolServer.id, allowedTools: ['add'] }] } },
    });
    ts.fake.script(
      { toolCalls: [{ id: 'a1', name: 'agentcalc__add', arguments: '{"a":1,"b":2}' }] },
      { text: '3' },
    );
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'add' })).rest();
    const offered = ts.fake.requests
      .at(-2)
      ?.body.tools.map((t: { function: { name: string } }) => t.function.name);
    expect(offered).toEqual(['agentcalc__add']);
    expect(events.find((e) => e.data.type === 'tool_call.completed')?.data).toMatchObject({
      name: 'agentcalc__add',
      status: 'completed',
      result: '3',
    });

    // Disabled: not offered, the turn says why.
    const off = await ts.api(base(ws.workspaceId, `/${toolServer.id}`), {
      method: 'PATCH',
      key: owner.token,
      json: { enabled: false },
    });
    expect(((await off.json()) as { toolServer: ToolServer }).toolServer.enabled).toBe(false);
    ts.fake.script({ text: 'no tools' });
    const disabled = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'again' })).rest();
    expect(ts.fake.requests.at(-1)?.body.tools ?? []).toEqual([]);
    expect(JSON.stringify(disabled.map((e) => e.data))).toContain('Tool server \\"agentcalc\\" is disabled');

    // Disconnected: gone for good.
    const del = await ts.api(base(ws.workspaceId, `/${toolServer.id}`), {
      method: 'DELETE',
      key: owner.token,
    });
    expect(await del.json()).toEqual({ disconnected: true, toolServerId: toolServer.id });
    ts.fake.script({ text: 'still none' });
    const gone = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'and again' })).rest();
    expect(ts.fake.requests.at(-1)?.body.tools ?? []).toEqual([]);
    expect(JSON.stringify(gone.map((e) => e.data))).toContain('is disconnected');
  });

  it('refuses an agent config referencing a server the workspace has not connected', async () => {
    const foreignOwner = await createTestSession(ts, other, { role: 'owner' });
    const { toolServer } = (await (
      await connect(foreignOwner.token, { name: 'theirs', url: mcp.url }, ts, other.workspaceId)
    ).json()) as { toolServer: ToolServer };
    for (const toolServerId of [toolServer.id, 'nope']) {
      const res = await ts.api('/managed-agents/agents', {
        method: 'POST',
        key: ws.apiKey,
        json: { name: 'Sneaky', config: { capabilities: { mcp_servers: [{ toolServerId }] } } },
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { code: string }).code).toBe('TOOL_SERVER_NOT_FOUND');
    }
  });
});
