import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createTestWorkspace, startTestServer, type TestServer } from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AiSuite,
  APIConnectionError,
  AuthenticationError,
  BadRequestError,
  NotFoundError,
  ServiceUnavailableError,
} from '../src/index.js';

let ts: TestServer;
beforeAll(async () => {
  ts = await startTestServer();
});
afterAll(() => ts?.close());

describe('SDK against the real server', () => {
  it('reads the public catalogs without a key', async () => {
    const client = new AiSuite({ baseURL: ts.url, apiKey: undefined });
    const { packs } = await client.catalogs.listPacks();
    expect(packs.length).toBeGreaterThan(2);
    const pack = await client.catalogs.getPack('helpdesk');
    expect(pack.tools.length).toBeGreaterThan(0);
    const { tools } = await client.catalogs.listPlatformTools({ runtimeMode: 'autonomous' });
    expect(tools.map((t) => t.toolId)).toContain('deliverable_write');
  });

  it('throws typed errors carrying status, body and request id', async () => {
    const client = new AiSuite({ baseURL: `${ts.url}/api/v1`, apiKey: 'svc_ai_nope' });
    const err = await client.me().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthenticationError);
    expect(err).toMatchObject({ status: 401, message: 'Invalid API key' });
    expect((err as AuthenticationError).requestId).toMatch(/^req_/);

    const nf = await client.catalogs.getPack('nope').catch((e: unknown) => e);
    expect(nf).toBeInstanceOf(NotFoundError);
    expect((nf as NotFoundError).message).toBe('Pack not found');

    const bad = await client.catalogs
      .listPlatformTools({ runtimeMode: 'never' as 'assist' })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(BadRequestError);
  });

  it('resolves the workspace behind a key once, with the raw response on request', async () => {
    const ws = await createTestWorkspace(ts, { name: 'SDK Co' });
    const client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey });
    expect(await client.workspaceId()).toBe(ws.workspaceId);
    const { data, response } = await client
      .request<{ workspace: { name: string } }>({ method: 'GET', path: '/me' })
      .withResponse();
    expect(data.workspace.name).toBe('SDK Co');
    expect(response.headers.get('x-request-id')).toMatch(/^req_/);
  });
});

describe('retries', () => {
  it('retries 503 honouring Retry-After, then succeeds', async () => {
    let calls = 0;
    const srv = http.createServer((_req, res) => {
      calls++;
      if (calls < 3) {
        res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '0' });
        res.end(JSON.stringify({ error: 'Service temporarily unavailable' }));
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ packs: [] }));
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const { port } = srv.address() as AddressInfo;
    try {
      const client = new AiSuite({ baseURL: `http://127.0.0.1:${port}`, maxRetries: 2 });
      await expect(client.catalogs.listPacks()).resolves.toEqual({ packs: [] });
      expect(calls).toBe(3);
      calls = 0;
      const noRetry = new AiSuite({ baseURL: `http://127.0.0.1:${port}`, maxRetries: 0 });
      await expect(noRetry.catalogs.listPacks()).rejects.toBeInstanceOf(ServiceUnavailableError);
      expect(calls).toBe(1);
    } finally {
      srv.close();
    }
  });

  it('reports a refused connection as APIConnectionError after retrying', async () => {
    const srv = http.createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const { port } = srv.address() as AddressInfo;
    await new Promise<void>((r) => srv.close(() => r()));
    const client = new AiSuite({ baseURL: `http://127.0.0.1:${port}`, maxRetries: 1 });
    await expect(client.catalogs.listPacks()).rejects.toBeInstanceOf(APIConnectionError);
  });
});
