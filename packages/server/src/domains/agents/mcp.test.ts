import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { createAgentWithSession, openTurn } from './test-helpers.js';

/**
 * Agents against a real MCP server from the registry: `@modelcontextprotocol/server-everything`
 * over streamable HTTP, as a child process on loopback. Its own log counts the sessions it
 * opened and the session terminations (`DELETE`) it received.
 */
interface EverythingServer {
  url: string;
  log: () => string;
  close(): Promise<void>;
}

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as net.AddressInfo;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

async function startEverything(): Promise<EverythingServer> {
  const require = createRequire(import.meta.url);
  const pkg = require.resolve('@modelcontextprotocol/server-everything/package.json');
  const port = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    [path.join(path.dirname(pkg), 'dist/index.js'), 'streamableHttp'],
    { env: { ...process.env, PORT: String(port), SECRET_OF_THE_MCP_SERVER: 'do-not-leak' }, stdio: 'pipe' },
  );
  let out = '';
  child.stdout?.on('data', (d) => {
    out += d.toString();
  });
  child.stderr?.on('data', (d) => {
    out += d.toString();
  });
  for (let waited = 0; !out.includes('listening on port'); waited += 100) {
    if (waited > 90_000 || child.exitCode !== null) {
      child.kill('SIGKILL');
      throw new Error(`server-everything did not start:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    log: () => out,
    async close() {
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
  };
}

const count = (text: string, needle: string) => text.split(needle).length - 1;

let everything: EverythingServer;
let ts: TestServer & { fake: FakeOpenAI };
let guarded: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let gws: TestWorkspace;

beforeAll(async () => {
  everything = await startEverything();
  ts = await startTestServerWithFakeModel({
    env: { OUTBOUND_ALLOWLIST: '127.0.0.1', RUN_POLL_INTERVAL_MS: '100' },
  });
  guarded = await startTestServerWithFakeModel({ env: { RUN_POLL_INTERVAL_MS: '100' } });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  gws = await createTestWorkspace(guarded, { creditsUsd: '10' });
});
afterAll(async () => {
  await ts?.close();
  await guarded?.close();
  await everything?.close();
});

const post = (s: TestServer, key: string, p: string, json: unknown) =>
  s.api(p, { method: 'POST', key, json });
const patch = (s: TestServer, key: string, p: string, json: unknown) =>
  s.api(p, { method: 'PATCH', key, json });

describe('strict agent config', () => {
  it('refuses a misspelt MCP key (allowed_tools) with 400 naming its path, on create and update', async () => {
    const config = {
      capabilities: { mcp_servers: [{ name: 'everything', url: everything.url, allowed_tools: ['echo'] }] },
    };
    const res = await post(ts, ws.apiKey, '/managed-agents/agents', { name: 'Typo', config });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: 'Unknown key: config.capabilities.mcp_servers.0.allowed_tools',
      code: 'VALIDATION_ERROR',
      details: {
        issues: [{ path: 'config.capabilities.mcp_servers.0.allowed_tools', message: 'Unknown key' }],
      },
    });
    const ok = await post(ts, ws.apiKey, '/managed-agents/agents', { name: 'Fine' });
    const agentId = ((await ok.json()) as { agent: { id: string } }).agent.id;
    const upd = await patch(ts, ws.apiKey, `/managed-agents/agents/${agentId}`, { config });
    expect(upd.status).toBe(400);
    expect(((await upd.json()) as any).details.issues[0].path).toBe(
      'config.capabilities.mcp_servers.0.allowed_tools',
    );
  });

  it('refuses unknown keys at every level and lists each', async () => {
    const res = await post(ts, ws.apiKey, '/managed-agents/agents', {
      name: 'Typos',
      config: {
        colour: 'blue',
        compute: { maxIteration: 3 },
        capabilities: { tools: { websearch: true }, deliverables: { enable: true } },
        customTools: [{ name: 't', callback_url: 'https://example.com/x' }],
      },
    });
    expect(res.status).toBe(400);
    const paths = ((await res.json()) as any).details.issues.map((i: { path: string }) => i.path).sort();
    expect(paths).toEqual([
      'config.capabilities.deliverables.enable',
      'config.capabilities.tools.websearch',
      'config.colour',
      'config.compute.maxIteration',
      'config.customTools.0.callback_url',
    ]);
  });

  it('keeps deep-merging known keys on update', async () => {
    const res = await post(ts, ws.apiKey, '/managed-agents/agents', {
      name: 'Merge',
      config: { compute: { maxIterations: 3 }, capabilities: { memory: { enabled: true } } },
    });
    const agentId = ((await res.json()) as { agent: { id: string } }).agent.id;
    const upd = await patch(ts, ws.apiKey, `/managed-agents/agents/${agentId}`, {
      config: { compute: { maxWallClockMs: 5000 }, capabilities: { memory: { scope: 'workspace' } } },
    });
    expect(upd.status).toBe(200);
    const { config } = ((await upd.json()) as { agent: { config: any } }).agent;
    expect(config.compute).toEqual({ maxIterations: 3, maxWallClockMs: 5000 });
    expect(config.capabilities.memory).toEqual({ enabled: true, scope: 'workspace' });
  });
});

describe('outbound URLs in the config', () => {
  it('refuses an MCP server or callback URL the SSRF guard blocks, at create and at update (400)', async () => {
    for (const [config, field] of [
      [
        { capabilities: { mcp_servers: [{ name: 'local', url: everything.url }] } },
        'config.capabilities.mcp_servers.0.url',
      ],
      [
        { capabilities: { mcp_servers: [{ name: 'meta', url: 'http://169.254.169.254/latest/mcp' }] } },
        'config.capabilities.mcp_servers.0.url',
      ],
      [
        { customTools: [{ name: 'cb', callbackUrl: 'http://10.0.0.5/hook' }] },
        'config.customTools.0.callbackUrl',
      ],
    ] as const) {
      const res = await post(guarded, gws.apiKey, '/managed-agents/agents', { name: 'Blocked', config });
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: string; code: string; details: unknown };
      expect(body.error).toMatch(
        new RegExp(`^${field.replaceAll('.', '\\.')} is not allowed: Refusing to connect`),
      );
      expect(body).toMatchObject({ code: 'URL_NOT_ALLOWED', details: { field } });
    }
    const ok = await post(guarded, gws.apiKey, '/managed-agents/agents', { name: 'Later' });
    const agentId = ((await ok.json()) as { agent: { id: string } }).agent.id;
    const upd = await patch(guarded, gws.apiKey, `/managed-agents/agents/${agentId}`, {
      config: { capabilities: { mcp_servers: [{ name: 'local', url: everything.url }] } },
    });
    expect(upd.status).toBe(400);
    expect(((await upd.json()) as { code: string }).code).toBe('URL_NOT_ALLOWED');
    // Nothing was stored.
    const get = await guarded.api(`/managed-agents/agents/${agentId}`, { key: gws.apiKey });
    expect(((await get.json()) as any).agent.config.capabilities.mcp_servers).toEqual([]);
  });

  it('accepts the same loopback URL when the operator allowlist permits it', async () => {
    const res = await post(ts, ws.apiKey, '/managed-agents/agents', {
      name: 'Allowed',
      config: { capabilities: { mcp_servers: [{ name: 'local', url: everything.url }] } },
    });
    expect(res.status).toBe(201);
  });
});

describe('a real MCP server (server-everything, streamable HTTP)', () => {
  it('offers only allowedTools, calls them, and ends every MCP session when the turn is done', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Everything',
      config: {
        capabilities: { mcp_servers: [{ name: 'everything', url: everything.url, allowedTools: ['echo'] }] },
      },
    });
    const before = everything.log();
    const turns = 3;
    for (let i = 0; i < turns; i++) {
      ts.fake.script(
        {
          toolCalls: [
            { id: `e${i}`, name: 'everything__echo', arguments: JSON.stringify({ message: `hi ${i}` }) },
            // Not offered: a model asking for it anyway gets an error, never the environment.
            { id: `g${i}`, name: 'everything__get-env', arguments: '{}' },
          ],
        },
        { text: `done ${i}` },
      );
      const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: `echo ${i}` })).rest();
      const offered = ts.fake.requests.at(-2)?.body.tools.map((t: any) => t.function.name);
      expect(offered).toEqual(['everything__echo']);
      const completed = events.filter((e) => e.data.type === 'tool_call.completed').map((e) => e.data);
      expect(completed[0]).toMatchObject({ name: 'everything__echo', status: 'completed' });
      expect(JSON.stringify(completed[0].result)).toContain(`hi ${i}`);
      expect(completed[1]).toMatchObject({ name: 'everything__get-env', status: 'error' });
      expect(JSON.stringify(events)).not.toContain('do-not-leak');
      expect(events.at(-1)?.data.type).toBe('run.completed');
    }
    await expect
      .poll(() => {
        const log = everything.log().slice(before.length);
        return {
          opened: count(log, 'Session initialized with ID'),
          terminated: count(log, 'Received session termination request'),
        };
      })
      .toEqual({ opened: turns, terminated: turns });
  });

  it('reports an unreachable MCP server as a warning event in the stream and in the timeline', async () => {
    const deadPort = await freePort();
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Half',
      config: {
        capabilities: {
          mcp_servers: [
            { name: 'gone', url: `http://127.0.0.1:${deadPort}/mcp` },
            { name: 'everything', url: everything.url, allowedTools: ['get-sum'] },
          ],
        },
      },
    });
    ts.fake.script({ text: 'I could only use some tools.' });
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'sum' })).rest();
    const types = events.map((e) => e.data.type);
    expect(types.slice(0, 2)).toEqual(['run.started', 'warning']);
    const warning = events[1]?.data;
    expect(warning).toMatchObject({ type: 'warning', code: 'MCP_SERVER_UNAVAILABLE', server: 'gone' });
    expect(warning.message).toMatch(
      /^MCP server "gone" is unavailable \(.+\); its tools are not offered in this turn$/,
    );
    // The reachable server's tools are still offered.
    expect(ts.fake.requests.at(-1)?.body.tools.map((t: any) => t.function.name)).toEqual([
      'everything__get-sum',
    ]);
    expect(types.at(-1)).toBe('run.completed');

    const timeline = (await (
      await ts.api(`/managed-agents/sessions/${sessionId}/events`, { key: ws.apiKey })
    ).json()) as { events: any[] };
    const run = timeline.events.find((e) => e.type === 'turn_run');
    expect(run.status).toBe('completed');
    expect(run.warnings).toEqual([
      { code: 'MCP_SERVER_UNAVAILABLE', message: warning.message, server: 'gone' },
    ]);
  });
});
