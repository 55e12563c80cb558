import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import express from 'express';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createServer } from '../server.js';
import {
  createTestDatabase,
  createTestWorkspace,
  startTestServer,
  type TestServer,
} from '../test/harness.js';
import { publicProcedure, router } from '../trpc.js';
import { errorHandler } from './errors.js';
import { openApiHandler } from './openapi-handler.js';
import { requestId } from './request-id.js';

let ts: TestServer;
beforeAll(async () => {
  // A stand-in console build: the fallback's rules, not the console, are under test here.
  const consoleDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-console-'));
  fs.writeFileSync(path.join(consoleDir, 'index.html'), '<!doctype html><title>AI Suite</title>');
  ts = await startTestServer({ env: { CONSOLE_DIR: consoleDir } });
});
afterAll(() => ts?.close());

const NOT_FOUND = { error: 'Not found', code: 'NOT_FOUND' };

describe('unknown paths', () => {
  it('answer 404 with the standard error body, under /api and elsewhere', async () => {
    const probes: [string, string][] = [
      ['GET', '/api'],
      ['GET', '/api/'],
      ['GET', '/api/nope'],
      ['GET', '/api/v2/me'],
      ['GET', '/api/v0/integration-packs'],
      ['GET', '/api/v1'],
      ['GET', '/api/v1/nope'],
      ['GET', '/api/v1/integration-packs/x/extra'],
      ['POST', '/api/v1/me'],
      ['DELETE', '/api/v1/integration-packs'],
      ['PUT', '/api/v1/platform-tools'],
      // GETs that accept text/html are the web console's pages (SPA fallback, below); a missing
      // file, another method or a client that does not ask for HTML gets the 404.
      ['GET', '/nope.txt'],
      ['GET', '/nope'],
      ['POST', '/nope'],
      ['GET', '/console-api/v1/nope'],
      ['GET', '/console-api/v2/me'],
    ];
    for (const [method, path] of probes) {
      const res = await fetch(`${ts.url}${path}`, { method });
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.headers.get('content-type'), `${method} ${path}`).toMatch(/^application\/json/);
      expect(await res.json(), `${method} ${path}`).toEqual(NOT_FOUND);
    }
  });

  it('outside /api: the console page only to requests that accept text/html, the JSON 404 otherwise', async () => {
    const browser = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';
    const prometheus =
      'application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1';
    for (const accept of [undefined, '*/*', 'application/json', prometheus, 'text/html;q=0']) {
      for (const p of ['/metrics', '/', '/settings/keys']) {
        const res = await fetch(`${ts.url}${p}`, { headers: accept ? { accept } : {} });
        const label = `${p} Accept: ${accept}`;
        expect(res.status, label).toBe(404);
        expect(res.headers.get('content-type'), label).toMatch(/^application\/json/);
        expect(res.headers.get('vary'), label).toMatch(/Accept/);
        expect(await res.json(), label).toEqual(NOT_FOUND);
      }
    }
    for (const accept of [browser, 'text/html', 'application/xhtml+xml']) {
      const res = await fetch(`${ts.url}/metrics`, { headers: { accept } });
      expect(res.status, accept).toBe(200);
      expect(res.headers.get('content-type'), accept).toMatch(/^text\/html/);
      expect(res.headers.get('vary'), accept).toMatch(/Accept/);
      expect(await res.text()).toContain('<title>AI Suite</title>');
    }
    // A browser asking for a missing file, or posting, still gets the 404.
    for (const [method, p] of [
      ['GET', '/favicon-missing.ico'],
      ['POST', '/metrics'],
    ] as const) {
      const res = await fetch(`${ts.url}${p}`, { method, headers: { accept: browser } });
      expect(res.status, `${method} ${p}`).toBe(404);
    }
  });
});

describe('request ids', () => {
  it('echoes a sane X-Request-Id and mints one otherwise, on success and error alike', async () => {
    const echoed = await fetch(`${ts.url}/healthz`, { headers: { 'x-request-id': 'trace-42.a:b_c' } });
    expect(echoed.headers.get('x-request-id')).toBe('trace-42.a:b_c');

    const minted = await fetch(`${ts.url}/api/v1/nope`);
    expect(minted.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);

    // Ids that could forge log lines or headers, or are just too long, are replaced.
    for (const bad of ['has%20space', 'x'.repeat(129), 'semi;colon', 'a"b', '<script>']) {
      const res = await fetch(`${ts.url}/healthz`, { headers: { 'x-request-id': bad } });
      expect(res.headers.get('x-request-id'), bad).toMatch(/^req_[0-9a-f]{32}$/);
    }
    const a = (await fetch(`${ts.url}/healthz`)).headers.get('x-request-id');
    const b = (await fetch(`${ts.url}/healthz`)).headers.get('x-request-id');
    expect(a).not.toBe(b);
  });
});

describe('probes and reference', () => {
  it('/healthz and /readyz answer for orchestrators', async () => {
    const health = await fetch(`${ts.url}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok' });
    const ready = await fetch(`${ts.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({
      status: 'ready',
      database: process.env.DATABASE_URL ? 'server' : 'embedded',
      objectStore: 'local',
    });
  });

  it('/docs serves the interactive reference of /api/v1/openapi.json from local assets', async () => {
    const redirect = await fetch(`${ts.url}/docs`, { redirect: 'manual' });
    expect(redirect.status).toBe(301);
    expect(redirect.headers.get('location')).toBe('/docs/');
    const page = await fetch(`${ts.url}/docs/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await page.text();
    expect(html).toContain('swagger-ui-bundle.js');
    expect(html).not.toMatch(/https?:\/\//); // no CDN
    const init = await (await fetch(`${ts.url}/docs/init.js`)).text();
    expect(init).toContain('"/api/v1/openapi.json"');
    const bundle = await fetch(`${ts.url}/docs/swagger-ui-bundle.js`);
    expect(bundle.status).toBe(200);
    expect((await bundle.text()).length).toBeGreaterThan(100_000);
    const doc = await fetch(`${ts.url}/api/v1/openapi.json`);
    expect(doc.status).toBe(200);
    expect(((await doc.json()) as { openapi: string }).openapi).toBe('3.1.0');
  });
});

/**
 * The tRPC procedures of the API are GETs so far; a POST procedure mounted through the same
 * wrapper shows what every future create/update endpoint gets for bad bodies.
 */
describe('tRPC POST bodies', () => {
  const echoRouter = router({
    create: publicProcedure
      .meta({ openapi: { method: 'POST', path: '/things', tags: ['Test'] }, status: 201 })
      .input(
        z.object({
          name: z.string({ error: 'name is required' }).min(1, 'name is required'),
          size: z.number().int().optional(),
        }),
      )
      .output(z.object({ id: z.string(), name: z.string() }))
      .mutation(({ input }) => ({ id: 'thing_1', name: input.name })),
  });
  let url: string;
  let srv: http.Server;
  beforeAll(async () => {
    const app = express();
    app.use(requestId);
    app.use('/api/v1', openApiHandler(echoRouter, ts.server.deps));
    app.use(errorHandler(ts.server.deps.log));
    srv = http.createServer(app);
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}/api/v1/things`;
  });
  afterAll(() => new Promise<void>((r) => srv.close(() => r())));

  const post = (body: string, contentType?: string) =>
    fetch(url, { method: 'POST', body, headers: contentType ? { 'content-type': contentType } : {} });

  it('answers 201 with meta.status on success', async () => {
    const res = await post(JSON.stringify({ name: 'a' }), 'application/json');
    expect(res.status).toBe(201);
    expect(await res.json()).toEqual({ id: 'thing_1', name: 'a' });
  });

  it('answers 400 Invalid request body to malformed JSON and non-JSON content types', async () => {
    const cases: [string, string, string | undefined][] = [
      ['malformed JSON', '{"name": "a",', 'application/json'],
      ['truncated', '{', 'application/json'],
      ['text/plain', '{"name":"a"}', 'text/plain'],
      ['form', 'name=a', 'application/x-www-form-urlencoded'],
      ['multipart', '--x\r\n\r\n--x--', 'multipart/form-data; boundary=x'],
      ['no content type', 'hello', undefined],
    ];
    for (const [name, body, type] of cases) {
      const res = await post(body, type);
      expect(res.status, name).toBe(400);
      const json = (await res.json()) as Record<string, unknown>;
      expect(json, name).toEqual({ error: 'Invalid request body' });
    }
  });

  it("uses the schema's message for validation failures, without leaking the framework body", async () => {
    const missing = await post('{}', 'application/json');
    expect(missing.status).toBe(400);
    const body = (await missing.json()) as Record<string, unknown>;
    expect(body).toEqual({
      error: 'name is required',
      code: 'VALIDATION_ERROR',
      details: { issues: [{ path: 'name', message: 'name is required' }] },
    });
    expect(Object.keys(body)).not.toContain('message');
    expect(Object.keys(body)).not.toContain('issues');

    const wrongType = (await (
      await post(JSON.stringify({ name: 'a', size: 'big' }), 'application/json')
    ).json()) as Record<string, unknown>;
    expect(wrongType.error).toMatch(/^size: Invalid input/);
    expect(Object.keys(wrongType).sort()).toEqual(['code', 'details', 'error']);
  });

  it('answers 413 to bodies over 1 MiB', async () => {
    const res = await post(JSON.stringify({ name: 'x'.repeat(1024 * 1024 + 10) }), 'application/json');
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: 'Request body too large' });
  });
});

describe('access log', () => {
  it('logs method, url, status, responseTime, requestId and workspaceId only, never the key', async () => {
    const lines: Record<string, unknown>[] = [];
    let raw = '';
    const sink = new Writable({
      write(chunk, _enc, cb) {
        raw += chunk.toString();
        for (const l of chunk.toString().split('\n')) if (l.trim()) lines.push(JSON.parse(l));
        cb();
      },
    });
    const db = await createTestDatabase();
    const server = await createServer({
      env: { DATA_DIR: ts.server.deps.config.dataDir, DATABASE_URL: db.databaseUrl, LOG_LEVEL: 'info' },
      embedded: db.embedded,
      logger: pino({ level: 'info' }, sink),
    });
    try {
      const { url } = await server.listen(0, '127.0.0.1');
      const wsTs = { ...ts, server } as TestServer;
      const ws = await createTestWorkspace(wsTs);
      await fetch(`${url}/api/v1/me?token=secret-query`, {
        headers: { authorization: `Bearer ${ws.apiKey}`, 'x-request-id': 'log-test-1', cookie: 'sid=abc' },
      });
      await fetch(`${url}/api/v1/nope`, { headers: { 'x-request-id': 'log-test-2' } });
      await fetch(`${url}/healthz`, { headers: { 'x-request-id': 'log-test-3' } });
      // The /chat fast path logs the same line, with the workspace once the key resolved.
      await fetch(`${url}/api/v1/chat`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${ws.apiKey}`,
          'content-type': 'application/json',
          'x-request-id': 'log-test-4',
        },
        body: '{}',
      });
      // An agent turn the fast path reads and hands to express (no message): one line, one id.
      const turnPath = `/api/v1/managed-agents/sessions/${randomUUID()}/messages`;
      const handedOver = await fetch(`${url}${turnPath}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ws.apiKey}`, 'content-type': 'application/json' },
        body: '{}',
      });
      expect(handedOver.status).toBe(400);
      expect(await handedOver.json()).toMatchObject({ error: 'message is required' });
      const mintedId = handedOver.headers.get('x-request-id');
      expect(mintedId).toMatch(/^req_/);
      expect(handedOver.headers.get('x-content-type-options')).toBe('nosniff');
      await expect.poll(() => lines.filter((l) => String(l.requestId).startsWith('log-test')).length).toBe(3);
      await expect.poll(() => lines.filter((l) => l.url === turnPath).length).toBe(1);
      expect(lines.filter((l) => l.url === turnPath)).toEqual([
        expect.objectContaining({ requestId: mintedId, status: 400, workspaceId: ws.workspaceId }),
      ]);

      const [meLine, notFoundLine, chatLine] = lines.filter((l) =>
        String(l.requestId).startsWith('log-test'),
      );
      expect(chatLine).toMatchObject({
        requestId: 'log-test-4',
        method: 'POST',
        url: '/api/v1/chat',
        status: 400,
        workspaceId: ws.workspaceId,
        level: 40,
      });
      const allowed = [
        'level',
        'time',
        'pid',
        'hostname',
        'msg',
        'requestId',
        'method',
        'url',
        'status',
        'responseTime',
        'workspaceId',
      ];
      for (const line of [meLine, notFoundLine, chatLine]) {
        expect(Object.keys(line ?? {}).filter((k) => !allowed.includes(k))).toEqual([]);
      }
      expect(meLine).toMatchObject({
        requestId: 'log-test-1',
        method: 'GET',
        url: '/api/v1/me',
        status: 200,
        workspaceId: ws.workspaceId,
        msg: 'request completed',
      });
      expect(typeof meLine?.responseTime).toBe('number');
      expect(notFoundLine).toMatchObject({ requestId: 'log-test-2', status: 404, level: 40 });
      expect(notFoundLine).not.toHaveProperty('workspaceId');
      expect(raw).not.toContain(ws.apiKey);
      expect(raw).not.toMatch(/authorization|cookie|secret-query|user-agent/i);
    } finally {
      await server.close();
      await db.drop();
    }
  });
});
