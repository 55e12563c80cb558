import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { type FakeOpenAI, type FakeOpenAIOptions, fakeOpenAIEnv, startFakeOpenAI } from '@ai-suite/testkit';
import pg from 'pg';
import { inject } from 'vitest';
import { EMBEDDED_EXTENSIONS } from '../db/extensions.js';
import './provided.js';
import { SESSION_COOKIE } from '../auth/sessions.js';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../db/embedded.js';
import { IdentityService } from '../domains/identity/service.js';
import type { Role } from '../domains/workspaces/entities.js';
import { usdToMicros, WorkspacesService } from '../domains/workspaces/service.js';
import { type AiSuiteServer, createServer } from '../server.js';

/**
 * A database of its own for one test file: a copy of the migrated embedded template, or a
 * fresh database on the PostgreSQL server named by DATABASE_URL, dropped on `drop()`.
 */
export interface TestDatabase {
  /** `DATABASE_URL` to give the server, when on the PostgreSQL server. */
  databaseUrl?: string;
  embedded?: EmbeddedPostgres;
  drop(): Promise<void>;
}

/**
 * A new, empty database on the PostgreSQL server at `serverUrl` (named `<prefix>_<random>`),
 * dropped (with its connections) on `drop()`. Tests and benches share it.
 */
export async function createServerDatabase(serverUrl: string, prefix = 'aisuite_t'): Promise<TestDatabase> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    databaseUrl: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: serverUrl });
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`);
      await c.end();
    },
  };
}

/** Where the tests' embedded databases run: as the server's default (`worker`), unless the environment says. */
const thread = () => (process.env.EMBEDDED_DATABASE_THREAD === 'main' ? 'main' : 'worker');

/** A new, empty embedded database with the extensions the server loads (pgvector), closed on `drop()`. */
export async function createEmbeddedDatabase(): Promise<TestDatabase> {
  const embedded = await startEmbeddedPostgres({ extensions: EMBEDDED_EXTENSIONS, thread: thread() });
  return { embedded, drop: () => embedded.close() };
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const serverUrl = process.env.DATABASE_URL;
  if (serverUrl) return createServerDatabase(serverUrl);
  const template = inject('pgTemplate');
  const loadDataDir = template ? new Blob([fs.readFileSync(template)]) : undefined;
  const embedded = await startEmbeddedPostgres({
    loadDataDir,
    extensions: EMBEDDED_EXTENSIONS,
    thread: thread(),
  });
  return { embedded, drop: () => embedded.close() };
}

export interface TestServer {
  url: string;
  /** `fetch` relative to `${url}/api/v1`. */
  api(path: string, init?: RequestInit & { key?: string; json?: unknown }): Promise<Response>;
  server: AiSuiteServer;
  db: TestDatabase;
  close(): Promise<void>;
}

export interface StartTestServerOptions {
  env?: Record<string, string | undefined>;
  /** Reuse a database (several servers on one database); not dropped by this server. */
  db?: TestDatabase;
}

export async function startTestServer(opts: StartTestServerOptions = {}): Promise<TestServer> {
  const db = opts.db ?? (await createTestDatabase());
  const dataDir = fs.mkdtempSync(`${process.env.TMPDIR ?? '/tmp'}/aisuite-test-`);
  let server: AiSuiteServer;
  try {
    server = await createServer({
      env: {
        LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
        DATA_DIR: dataDir,
        DATABASE_URL: db.databaseUrl,
        SHUTDOWN_GRACE_MS: '1000',
        ...opts.env,
      },
      embedded: db.embedded,
    });
  } catch (err) {
    if (!opts.db) await db.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  const { url } = await server.listen(0, '127.0.0.1');
  return {
    url,
    server,
    db,
    api(path, init = {}) {
      const { key, json, headers, ...rest } = init;
      const h = new Headers(headers);
      if (key) h.set('authorization', `Bearer ${key}`);
      let body = rest.body;
      if (json !== undefined) {
        h.set('content-type', 'application/json');
        body = JSON.stringify(json);
      }
      return fetch(`${url}/api/v1${path}`, { ...rest, headers: h, body });
    },
    async close() {
      await server.close();
      if (!opts.db) await db.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface TestWorkspace {
  workspaceId: string;
  apiKey: string;
  keyId: string;
}

/** A workspace's credit balance in micro-dollars, read from the database. */
export async function creditBalance(ts: TestServer, workspaceId: string): Promise<number> {
  const rows = await ts.server.deps
    .em()
    .execute<{ b: string }[]>('select credit_balance_micros as b from workspaces where id = ?', [
      workspaceId,
    ]);
  return Number(rows[0]?.b);
}

/** A workspace with one API key, credits and quota as asked. */
export async function createTestWorkspace(
  ts: TestServer,
  opts: { name?: string; creditsUsd?: string; monthlyTokenQuota?: number | null } = {},
): Promise<TestWorkspace> {
  const svc = new WorkspacesService(ts.server.deps.em());
  const ws = await svc.createWorkspace({
    name: opts.name ?? `ws-${randomBytes(4).toString('hex')}`,
    monthlyTokenQuota: opts.monthlyTokenQuota ?? null,
  });
  if (opts.creditsUsd) await svc.grantCredits(ws.id, usdToMicros(opts.creditsUsd));
  const { key, apiKey } = await svc.createApiKey({ workspaceId: ws.id, name: 'test' });
  return { workspaceId: ws.id, apiKey: key, keyId: apiKey.id };
}

/**
 * PostgreSQL server only: holds the row of `workspaceId`'s `chat` rate-limit window locked from
 * another connection, so that the workspace's admission statements wait until `release()` (idempotent)
 * (PGlite runs every connection in one session, where nothing waits for a lock).
 */
export async function lockChatRateLimitRow(
  ts: TestServer,
  workspaceId: string,
): Promise<{ release: () => Promise<void> }> {
  const client = new pg.Client({ connectionString: ts.db.databaseUrl });
  await client.connect();
  await client.query('begin');
  await client.query('select * from rate_limit_windows where key = $1 for update', [`chat:${workspaceId}`]);
  let released: Promise<void> | undefined;
  return {
    // Once, however often it is called (a test's own call, then its `finally`).
    release: () => {
      released ??= client.query('commit').then(
        () => client.end(),
        () => client.end(),
      );
      return released;
    },
  };
}

export interface TestSession {
  userId: string;
  email: string;
  password: string;
  role: Role;
  workspaceId: string;
  sessionId: string;
  /** The session token (`svc_ss_…`): pass it as `key` to `ts.api` for a bearer session. */
  token: string;
  /** `Cookie` header value carrying the session, for cookie-session requests. */
  cookie: string;
}

/**
 * A person signed in to `ws` with `role` (default `owner`): the user (created with a password,
 * or found by email) joins the workspace and a session is opened through the same code the
 * sign-in endpoint uses. Cookie requests that change state also need `origin: ts.url`.
 */
export async function createTestSession(
  ts: TestServer,
  ws: { workspaceId: string },
  opts: { role?: Role; email?: string; password?: string } = {},
): Promise<TestSession> {
  const em = ts.server.deps.em();
  const email = opts.email ?? `user-${randomBytes(4).toString('hex')}@example.com`;
  const password = opts.password ?? `pw-${randomBytes(8).toString('hex')}`;
  const role = opts.role ?? 'owner';
  const svc = new WorkspacesService(em);
  const user = await svc.ensureUser(email, password);
  await svc.ensureMembership(ws.workspaceId, user.id, role);
  const signedIn = await new IdentityService(em, ts.server.deps.identity).openSession(
    user.id,
    'password',
    { ip: '127.0.0.1', userAgent: 'test-harness' },
    ws.workspaceId,
  );
  return {
    userId: user.id,
    email,
    password,
    role,
    workspaceId: ws.workspaceId,
    sessionId: signedIn.session.id,
    token: signedIn.token,
    cookie: `${SESSION_COOKIE}=${signedIn.token}`,
  };
}

export { type FakeOpenAI, type FakeOpenAIOptions, fakeOpenAIEnv, startFakeOpenAI };

/**
 * A test server whose model provider is a fake OpenAI-compatible upstream on loopback
 * (chat model id `fake-chat` at $1/$2 per million input/output tokens, embeddings `fake-embed`).
 * `close()` stops both.
 */
export async function startTestServerWithFakeModel(
  opts: StartTestServerOptions & { fake?: FakeOpenAIOptions } = {},
): Promise<TestServer & { fake: FakeOpenAI }> {
  const fake = await startFakeOpenAI(opts.fake);
  let ts: TestServer;
  try {
    ts = await startTestServer({ ...opts, env: { ...fakeOpenAIEnv(fake), ...opts.env } });
  } catch (err) {
    await fake.close();
    throw err;
  }
  return {
    ...ts,
    fake,
    async close() {
      await ts.close();
      await fake.close();
    },
  };
}
