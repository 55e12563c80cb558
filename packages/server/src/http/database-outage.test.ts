import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isDatabaseUnavailable } from '../db/unavailable.js';
import { createAgentWithSession, openTurn, readSse } from '../domains/agents/test-helpers.js';
import {
  createServerDatabase,
  createTestDatabase,
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestDatabase,
  type TestServer,
  type TestWorkspace,
} from '../test/harness.js';

/**
 * While the database is unavailable (restarting, refusing connections, connections cut by an
 * operator) every API route answers 503 `Service temporarily unavailable` with `Retry-After`,
 * not 500: tRPC procedures, raw routes, the `/chat` fast path, and an SSE stream already open
 * (an `error` event). The process keeps answering `/healthz`, and serves again once the database
 * is back, without a restart.
 *
 * On the PostgreSQL server the test database is reached through a TCP proxy of the test's own,
 * which it stops (connections cut, new ones refused: what clients see of a restart) and starts
 * again; it also terminates the database's backends (`pg_terminate_backend`, SQLSTATE 57P01).
 * On PGlite the embedded engine is stopped under the running server.
 */
const onServer = Boolean(process.env.DATABASE_URL);
const UNAVAILABLE = { error: 'Service temporarily unavailable', code: 'SERVICE_UNAVAILABLE' };

/** A TCP proxy to the PostgreSQL server that can be stopped and started again on its port. */
class TcpProxy {
  private server: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();
  port = 0;
  constructor(private readonly target: { host: string; port: number }) {}

  async start(): Promise<void> {
    if (this.server) return;
    const server = net.createServer((client) => {
      const upstream = net.connect(this.target);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', resolve);
    });
    this.port = (server.address() as net.AddressInfo).port;
    this.server = server;
  }

  /** Every connection cut, new ones refused. */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  }
}

async function expectUnavailable(res: Response, what: string) {
  expect(res.status, what).toBe(503);
  expect(res.headers.get('retry-after'), what).toBe('5');
  expect(await res.json(), what).toEqual(UNAVAILABLE);
}

describe('what counts as the database being unavailable', () => {
  it('connection errors from pg, MikroORM and the pools, through wrappers; not other failures', async () => {
    const refused = await new Promise<Error>((resolve) => {
      const s = net.connect({ host: '127.0.0.1', port: 1 });
      s.on('error', resolve);
    });
    expect(isDatabaseUnavailable(refused)).toBe(true);
    for (const code of ['57P01', '57P03', '08006', '53300']) {
      expect(isDatabaseUnavailable(Object.assign(new Error('x'), { code })), code).toBe(true);
    }
    // MikroORM's DriverException keeps the driver's code; our code wraps in `cause`.
    const wrapped = new Error('failed', { cause: Object.assign(new Error('y'), { code: '57P01' }) });
    expect(isDatabaseUnavailable(wrapped)).toBe(true);
    expect(isDatabaseUnavailable(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isDatabaseUnavailable(new Error('timeout exceeded when trying to connect'))).toBe(true);
    expect(isDatabaseUnavailable(Object.assign(new Error('t'), { name: 'KnexTimeoutError' }))).toBe(true);
    expect(
      isDatabaseUnavailable(Object.assign(new Error('gone'), { code: 'ENOENT', syscall: 'connect' })),
    ).toBe(true);
    // A wrong query, a constraint, a missing file: not an outage.
    for (const code of ['42P01', '23505', '22P02', '40P01']) {
      expect(isDatabaseUnavailable(Object.assign(new Error('x'), { code })), code).toBe(false);
    }
    expect(
      isDatabaseUnavailable(Object.assign(new Error('no file'), { code: 'ENOENT', syscall: 'open' })),
    ).toBe(false);
    expect(isDatabaseUnavailable(new Error('boom'))).toBe(false);
  });
});

describe.skipIf(!onServer)('a PostgreSQL server that restarts', { timeout: 180_000 }, () => {
  let db: TestDatabase;
  let proxy: TcpProxy;
  let ts: TestServer & { fake: FakeOpenAI };
  let ws: TestWorkspace;
  let dbName: string;

  beforeAll(async () => {
    const serverUrl = new URL(process.env.DATABASE_URL as string);
    db = await createServerDatabase(serverUrl.toString());
    const real = new URL(db.databaseUrl as string);
    dbName = real.pathname.slice(1);
    proxy = new TcpProxy({ host: real.hostname, port: Number(real.port || 5432) });
    await proxy.start();
    const viaProxy = new URL(real.toString());
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = String(proxy.port);
    ts = await startTestServerWithFakeModel({
      db: { databaseUrl: viaProxy.toString(), drop: async () => undefined },
      env: { RUN_POLL_INTERVAL_MS: '100' },
    });
    ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  });

  afterAll(async () => {
    await proxy?.start().catch(() => undefined);
    await ts?.close();
    await proxy?.stop();
    await db?.drop();
  });

  it('answers 503 with Retry-After on every kind of route while it is down, and serves again when it is back', async () => {
    // A run waiting on the integrator: its stream reads the log from the database.
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Outage',
      config: { customTools: [{ name: 'ask_human' }] },
    });
    ts.fake.script({ toolCalls: [{ id: 'h1', name: 'ask_human', arguments: '{}' }] });
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'wait' });
    const runId = (await turn.until('run.started')).data.runId as string;
    await turn.until('tool_call.pending');
    await turn.close();
    const stream = await ts.api(`/managed-agents/sessions/${sessionId}/runs/${runId}/stream`, {
      key: ws.apiKey,
    });
    expect(stream.status).toBe(200);
    const events = readSse(stream);
    expect((await events.next()).value?.data.type).toBe('run.started');

    await proxy.stop();

    // tRPC procedure, /chat fast path, a raw multipart route, the agent turn fast path.
    await expectUnavailable(await ts.api('/me', { key: ws.apiKey }), 'GET /me');
    await expectUnavailable(
      await ts.api('/chat', {
        method: 'POST',
        key: ws.apiKey,
        json: { messages: [{ role: 'user', content: 'hi' }] },
      }),
      'POST /chat',
    );
    const fd = new FormData();
    fd.append('kind', 'files');
    fd.append('file[]', new Blob(['x']), 'a.txt');
    await expectUnavailable(
      await ts.api(`/workspaces/${ws.workspaceId}/storage/import`, {
        method: 'POST',
        key: ws.apiKey,
        body: fd,
      }),
      'POST storage/import',
    );
    await expectUnavailable(
      await ts.api(`/managed-agents/sessions/${sessionId}/messages`, {
        method: 'POST',
        key: ws.apiKey,
        json: { message: 'again' },
      }),
      'POST messages',
    );
    // The open stream ends with an error event saying so (then the connection is cut).
    let last: { type?: string; code?: string; message?: string } | undefined;
    try {
      for await (const ev of { [Symbol.asyncIterator]: () => events }) last = ev.data;
    } catch {
      /* cut after the error event */
    }
    expect(last).toEqual({
      type: 'error',
      code: 'SERVICE_UNAVAILABLE',
      message: 'Service temporarily unavailable',
    });
    // The process itself is alive, and says it is not ready.
    expect((await fetch(`${ts.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${ts.url}/readyz`)).status).toBe(503);

    await proxy.start();
    await expect
      .poll(async () => (await ts.api('/me', { key: ws.apiKey })).status, { timeout: 60_000, interval: 200 })
      .toBe(200);
    expect(
      (
        await ts.api('/chat', {
          method: 'POST',
          key: ws.apiKey,
          json: { messages: [{ role: 'user', content: 'hi' }] },
        })
      ).status,
    ).toBe(200);
  });

  it('connections terminated by an operator (57P01) answer 503 or succeed, never 500', async () => {
    const statuses: number[] = [];
    let stop = false;
    const load = Array.from({ length: 8 }, async () => {
      while (!stop) {
        const res = await ts.api('/me', { key: ws.apiKey });
        statuses.push(res.status);
        if (res.status !== 200) expect(await res.json()).toEqual(UNAVAILABLE);
        else await res.arrayBuffer();
      }
    });
    const admin = new (await import('pg')).default.Client({ connectionString: process.env.DATABASE_URL });
    await admin.connect();
    try {
      for (let i = 0; i < 5; i++) {
        await new Promise((r) => setTimeout(r, 150));
        await admin.query(
          'select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
          [dbName],
        );
      }
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      stop = true;
      await Promise.all(load);
      await admin.end();
    }
    expect(statuses.length).toBeGreaterThan(20);
    expect(new Set(statuses.filter((s) => s !== 200 && s !== 503))).toEqual(new Set());
    await expect
      .poll(async () => (await ts.api('/me', { key: ws.apiKey })).status, { timeout: 30_000, interval: 200 })
      .toBe(200);
  });
});

describe.skipIf(onServer)('the embedded engine stopped under a running server', { timeout: 120_000 }, () => {
  it('answers 503 with Retry-After, and /healthz still answers', async () => {
    const db = await createTestDatabase();
    const ts = await startTestServerWithFakeModel({ db });
    try {
      const ws = await createTestWorkspace(ts, { creditsUsd: '1' });
      expect((await ts.api('/me', { key: ws.apiKey })).status).toBe(200);
      await db.embedded?.close();
      await expectUnavailable(await ts.api('/me', { key: ws.apiKey }), 'GET /me');
      await expectUnavailable(
        await ts.api('/chat', {
          method: 'POST',
          key: ws.apiKey,
          json: { messages: [{ role: 'user', content: 'hi' }] },
        }),
        'POST /chat',
      );
      expect((await fetch(`${ts.url}/healthz`)).status).toBe(200);
    } finally {
      await ts.close().catch(() => undefined);
      await db.drop().catch(() => undefined);
    }
  });
});
