import dns from 'node:dns';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestMcpServer, type TestMcpServer } from '@ai-suite/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestSession,
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { guardedFetch, ResponseTooLargeError } from './guarded-fetch.js';
import { OutboundBlockedError, parseAllowlist, setHostResolverForTests } from './outbound.js';
import { createAgentWithSession, openTurn } from './test-helpers.js';

/**
 * DNS rebinding: a name that resolves to a public address when the service checks a URL and to
 * a private one when it connects. The resolver of the guard is replaced by one that does just
 * that for `localhost` (the name the machine itself resolves to loopback, so a client that
 * bypassed the guard's lookup would really reach the servers below, which listen on
 * 127.0.0.1): the next lookup answers a public address, every later one 127.0.0.1.
 */
const HOST = 'localhost';
const PUBLIC = '93.184.216.34';

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let mcp: TestMcpServer;
let site: { port: number; hits: string[]; close(): Promise<void> };
let publicAnswers = Number.POSITIVE_INFINITY;
let lookups = 0;
let restore: () => void = () => undefined;

/** From now on, one more lookup of HOST answers the public address; every later one loopback. */
const rebindAfterOneLookup = () => {
  publicAnswers = lookups + 1;
};

beforeAll(async () => {
  mcp = await startTestMcpServer();
  const hits: string[] = [];
  const server = http.createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    if (req.url === '/huge') {
      // An answer far above any bound, written as fast as it is read.
      res.writeHead(200, { 'content-type': 'application/json' });
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      let sent = 0;
      const pump = () => {
        while (sent < 64 * 1024 * 1024) {
          sent += chunk.length;
          if (!res.write(chunk)) return res.once('drain', pump);
        }
        res.end();
      };
      res.on('close', () => {
        sent = Number.POSITIVE_INFINITY;
      });
      pump();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"result":"reached"}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  site = {
    port: (server.address() as AddressInfo).port,
    hits,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
  ts = await startTestServerWithFakeModel({ env: { RUN_POLL_INTERVAL_MS: '100' } });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
});

afterEach(() => {
  restore();
  restore = () => undefined;
});

afterAll(async () => {
  await ts?.close();
  await mcp?.close();
  await site?.close();
});

function installRebindingDns() {
  lookups = 0;
  publicAnswers = Number.POSITIVE_INFINITY;
  restore = setHostResolverForTests(async (name) => {
    if (name !== HOST) return dns.promises.lookup(name, { all: true });
    lookups++;
    return [{ address: lookups <= publicAnswers ? PUBLIC : '127.0.0.1', family: 4 }];
  });
}

const mcpUrl = () => mcp.url.replace('127.0.0.1', HOST);

describe('the guarded fetch (what the MCP client connects with)', () => {
  it('connects where the policy allows, and is refused at the connection when the name resolves to loopback', async () => {
    installRebindingDns();
    publicAnswers = 0; // every lookup of HOST answers loopback
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' });
    const blocked = guardedFetch(parseAllowlist(undefined), { maxBytes: 1024 })(
      `http://${HOST}:${site.port}/x`,
      {
        method: 'POST',
        body,
      },
    );
    await expect(blocked).rejects.toThrow(OutboundBlockedError);
    await expect(
      guardedFetch(parseAllowlist(undefined), { maxBytes: 1024 })(`http://127.0.0.1:${site.port}/x`),
    ).rejects.toThrow(/private or reserved address/);
    expect(site.hits).toEqual([]);
    // The operator allows the name: the very same request reaches the server.
    const allowed = await guardedFetch(parseAllowlist(HOST), { maxBytes: 1024 })(
      `http://${HOST}:${site.port}/x`,
      {
        method: 'POST',
        body,
      },
    );
    expect(allowed.status).toBe(200);
    expect(await allowed.json()).toEqual({ result: 'reached' });
    expect(site.hits).toEqual(['POST /x']);
    site.hits.length = 0;
  });

  it('ends an answer larger than its bound as it streams, without reading it whole', async () => {
    const before = process.memoryUsage().rss;
    const res = await guardedFetch(parseAllowlist('127.0.0.1'), { maxBytes: 1024 * 1024 })(
      `http://127.0.0.1:${site.port}/huge`,
    );
    expect(res.status).toBe(200);
    const err = await res.arrayBuffer().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Error);
    expect(String((err as Error).cause ?? err)).toMatch(/exceeds 1048576 bytes|terminated/);
    // 64 MB were on offer; far less than that was taken in.
    expect(process.memoryUsage().rss - before).toBeLessThan(48 * 1024 * 1024);
    expect(ResponseTooLargeError.name).toBe('ResponseTooLargeError');
    site.hits.length = 0;
  });
});

describe('DNS rebinding against every outbound call of an agent turn', { timeout: 120_000 }, () => {
  it('MCP: the URL checks out, the connection is refused, the server is never reached', async () => {
    installRebindingDns();
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Rebound MCP',
      config: { capabilities: { mcp_servers: [{ name: 'calc', url: mcpUrl() }] } },
    });
    const calls = mcp.calls.length;
    rebindAfterOneLookup();
    ts.fake.script({ text: 'No tools today.' });
    const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: 'add 2 and 3' })).rest();
    const warning = events.find((e) => e.data.type === 'warning')?.data;
    expect(warning).toMatchObject({ code: 'MCP_SERVER_UNAVAILABLE', server: 'calc' });
    expect(warning?.message).toContain('Blocked address for localhost');
    expect(events.at(-1)?.data.type).toBe('run.completed');
    // The URL check itself saw the public address; the connection(s) saw loopback.
    expect(lookups).toBeGreaterThanOrEqual(2);
    expect(ts.fake.requests.at(-1)?.body.tools ?? []).toEqual([]);
    expect(mcp.calls.length).toBe(calls);
  });

  it('MCP tool-server connect: refused the same way, 400 naming the reason', async () => {
    installRebindingDns();
    const owner = await createTestSession(ts, ws, { role: 'owner' });
    rebindAfterOneLookup();
    const res = await ts.api(`/workspaces/${ws.workspaceId}/tool-servers`, {
      method: 'POST',
      key: owner.token,
      json: { name: 'rebound', url: mcpUrl() },
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: string; code: string };
    expect(body.code).toBe('TOOL_SERVER_UNREACHABLE');
    expect(body.error).toContain('Blocked address for localhost');
  });

  it('callbacks and web_fetch: the check passes, the connection is refused, nothing is sent', async () => {
    installRebindingDns();
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Rebound tools',
      config: {
        capabilities: { tools: { web_fetch: true } },
        customTools: [{ name: 'hook', callbackUrl: `http://${HOST}:${site.port}/hook` }],
      },
    });
    for (const call of [
      { id: 'c1', name: 'hook', arguments: '{}' },
      { id: 'f1', name: 'web_fetch', arguments: JSON.stringify({ url: `http://${HOST}:${site.port}/page` }) },
    ]) {
      rebindAfterOneLookup();
      ts.fake.script({ toolCalls: [call] }, { text: 'Done.' });
      const events = await (await openTurn(ts, ws.apiKey, sessionId, { message: `use ${call.name}` })).rest();
      const done = events.find((e) => e.data.type === 'tool_call.completed')?.data;
      expect(done, call.name).toMatchObject({ name: call.name, status: 'error' });
      expect(String(done?.error)).toContain('Blocked address for localhost');
    }
    expect(site.hits).toEqual([]);
  });
});
