import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PrincipalKind } from '../auth/authenticate.js';
import { SESSION_COOKIE } from '../auth/sessions.js';
import { IdentityService } from '../domains/identity/service.js';
import {
  createTestSession,
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestSession,
  type TestWorkspace,
} from '../test/harness.js';
import { kindsOfSecurity } from './openapi-security.js';

/**
 * Who may call what (spec 5), by path. Every operation of the OpenAPI document must match
 * exactly one rule: a new route fails this test until someone decides here which principal
 * kinds it accepts.
 */
const PUBLIC: PrincipalKind[] = [];
const RULES: { name: string; match: RegExp; kinds: PrincipalKind[] }[] = [
  { name: 'catalogs (public)', match: /^\/(integration-packs|platform-tools)(\/|$)/, kinds: PUBLIC },
  {
    name: 'signed object links (the signature is the credential)',
    match: /^\/storage\/objects\//,
    kinds: PUBLIC,
  },
  {
    name: 'sign-in, sign-up, invitation links (the token is the credential), OIDC sign-in, providers',
    match: /^\/auth\/(sign-in|sign-up|invitations\/(preview|accept)|providers|oidc\/(start|callback))$/,
    kinds: PUBLIC,
  },
  {
    name: 'a signed-in person’s own session',
    match: /^\/auth\/(sign-out|session|sessions|workspace|password)(\/|$)/,
    kinds: ['session'],
  },
  { name: 'chat', match: /^\/chat$/, kinds: ['apiKey'] },
  { name: 'agents, sessions, runs', match: /^\/managed-agents\//, kinds: ['apiKey'] },
  { name: 'artifacts', match: /^\/artifacts\//, kinds: ['apiKey'] },
  { name: 'image', match: /^\/image$/, kinds: ['apiKey'] },
  { name: 'insights', match: /^\/workspaces\/\{workspaceId\}\/insights\//, kinds: ['apiKey'] },
  {
    name: 'API key management (sessions of owners and admins)',
    match: /^\/workspaces\/\{workspaceId\}\/api-keys(\/|$)/,
    kinds: ['session'],
  },
  {
    name: 'members, invitations, tool servers (sessions; roles checked per operation)',
    match: /^\/workspaces\/\{workspaceId\}\/(members|invitations|tool-servers)(\/|$)/,
    kinds: ['session'],
  },
  { name: 'document question answering (spec 5: RAG, session only)', match: /^\/rag\//, kinds: ['session'] },
  { name: 'storage', match: /^\/workspaces\/\{workspaceId\}\/storage(\/|$)/, kinds: ['apiKey', 'session'] },
  { name: 'apps chat and memory', match: /^\/apps\/\{appId\}\/(chat|memory)\//, kinds: ['apiKey', 'widget'] },
  { name: 'apps management (extension)', match: /^\/apps(\/\{appId\})?$/, kinds: ['apiKey'] },
  { name: 'widget token issuance (extension)', match: /^\/widget-tokens(\/|$)/, kinds: ['apiKey'] },
  { name: '/me (extension)', match: /^\/me$/, kinds: ['apiKey'] },
  { name: 'model catalog (extension)', match: /^\/models$/, kinds: ['apiKey'] },
  { name: 'OpenAI-compatible surface (issue 40: API keys only)', match: /^\/openai\//, kinds: ['apiKey'] },
];

/**
 * Refused on the console's mount too (decision 0047): the OpenAI-compatible surface is for
 * integrators' clients, which hold API keys; no session, there or on `/api/v1`.
 */
const KEY_ONLY_EVERYWHERE = /^\/openai\//;

const ALL_KINDS = ['apiKey', 'session', 'widget'] as const;
type Credential = 'apiKey' | 'sessionBearer' | 'sessionCookie' | 'widget' | 'none';
const KIND_OF: Record<Credential, PrincipalKind | undefined> = {
  apiKey: 'apiKey',
  sessionBearer: 'session',
  sessionCookie: 'session',
  widget: 'widget',
  none: undefined,
};
/** What a route answers a caller it does not accept (the 401s of `AuthPolicy.refusal`). */
const REFUSALS = new Set(['Invalid API key', 'Authentication required']);

interface Operation {
  security?: Record<string, string[]>[];
}

let ts: TestServer;
let ws: TestWorkspace;
let owner: TestSession;
let widgetToken: string;
let appId: string;
let doc: { paths: Record<string, Record<string, Operation>> };

beforeAll(async () => {
  ts = await startTestServer();
  ws = await createTestWorkspace(ts);
  owner = await createTestSession(ts, ws, { role: 'owner' });
  const app = await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'walk' } });
  appId = ((await app.json()) as { app: { id: string } }).app.id;
  const wt = await ts.api('/widget-tokens', { method: 'POST', key: ws.apiKey, json: {} });
  widgetToken = ((await wt.json()) as { token: string }).token;
  doc = (await (await ts.api('/openapi.json')).json()) as typeof doc;
});
afterAll(() => ts?.close());

/** A fresh session of the owner per request: some operations (sign-out) end the one they get. */
async function freshSessionToken(): Promise<string> {
  const signedIn = await new IdentityService(ts.server.deps.em(), ts.server.deps.identity).openSession(
    owner.userId,
    'password',
    { ip: null, userAgent: 'walk' },
    ws.workspaceId,
  );
  return signedIn.token;
}

function concretePath(template: string): string {
  return template.replace(/\{(\w+)\}/g, (_, name: string) => {
    if (name === 'workspaceId') return ws.workspaceId;
    if (name === 'appId') return appId;
    if (name === 'key') return 'no/such/object';
    return randomUUID();
  });
}

/** `/api/v1` keeps spec 5's table; the console's mount takes the session only (decision 0025). */
type Mount = '/api/v1' | '/console-api/v1';

async function call(method: string, template: string, credential: Credential, mount: Mount = '/api/v1') {
  const headers: Record<string, string> = {};
  if (credential === 'apiKey') headers.authorization = `Bearer ${ws.apiKey}`;
  if (credential === 'widget') headers.authorization = `Bearer ${widgetToken}`;
  if (credential === 'sessionBearer') headers.authorization = `Bearer ${await freshSessionToken()}`;
  if (credential === 'sessionCookie') {
    headers.cookie = `${SESSION_COOKIE}=${await freshSessionToken()}`;
    headers.origin = ts.url;
  }
  if (method !== 'get') headers['content-type'] = 'application/json';
  const res = await fetch(`${ts.url}${mount}${concretePath(template)}`, {
    method: method.toUpperCase(),
    headers,
    ...(method === 'get' ? {} : { body: '{}' }),
  });
  const text = await res.text();
  let error: string | undefined;
  try {
    const e = (JSON.parse(text) as { error?: string | { code?: string } }).error;
    // The OpenAI-compatible surface refuses in OpenAI's shape (`code: invalid_api_key`).
    error = typeof e === 'object' && e?.code === 'invalid_api_key' ? 'Invalid API key' : (e as string);
  } catch {
    error = undefined;
  }
  return { status: res.status, refused: res.status === 401 && !!error && REFUSALS.has(error) };
}

describe('principal kinds of every operation', () => {
  it('every operation matches exactly one rule, and its documented security says the same', () => {
    let count = 0;
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        count++;
        const rules = RULES.filter((r) => r.match.test(path));
        expect(
          rules.map((r) => r.name),
          `${method.toUpperCase()} ${path}: decide its principal kinds in RULES`,
        ).toHaveLength(1);
        expect(op.security, `${method.toUpperCase()} ${path} has no security`).toBeDefined();
        expect(kindsOfSecurity(op.security).sort(), `${method.toUpperCase()} ${path}`).toEqual(
          [...(rules[0]?.kinds ?? [])].sort(),
        );
      }
    }
    expect(count).toBeGreaterThan(50);
  });

  it('every operation accepts exactly those kinds, over HTTP', async () => {
    const mismatches: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const method of Object.keys(item)) {
        const expected = RULES.find((r) => r.match.test(path))?.kinds ?? [];
        for (const credential of Object.keys(KIND_OF) as Credential[]) {
          const kind = KIND_OF[credential];
          const shouldAccept = expected.length === 0 || (kind !== undefined && expected.includes(kind));
          const { status, refused } = await call(method, path, credential);
          if (refused === shouldAccept) {
            mismatches.push(
              `${method.toUpperCase()} ${path} with ${credential}: ${status} (${shouldAccept ? 'should accept' : 'should refuse'})`,
            );
          }
        }
      }
    }
    expect(mismatches).toEqual([]);
  }, 180_000); // five credentials for each of ~80 operations, one request at a time on a loaded machine

  it('on the console mount, every operation that is not public accepts a session and nothing else', async () => {
    const mismatches: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const method of Object.keys(item)) {
        const isPublic = (RULES.find((r) => r.match.test(path))?.kinds ?? []).length === 0;
        for (const credential of Object.keys(KIND_OF) as Credential[]) {
          const shouldAccept =
            isPublic || (KIND_OF[credential] === 'session' && !KEY_ONLY_EVERYWHERE.test(path));
          const { status, refused } = await call(method, path, credential, '/console-api/v1');
          if (refused === shouldAccept) {
            mismatches.push(
              `${method.toUpperCase()} /console-api/v1${path} with ${credential}: ${status} (${shouldAccept ? 'should accept' : 'should refuse'})`,
            );
          }
        }
      }
    }
    expect(mismatches).toEqual([]);
  }, 180_000);

  it('covers every kind somewhere', () => {
    const seen = new Set(RULES.flatMap((r) => r.kinds));
    for (const k of ALL_KINDS) expect(seen.has(k), k).toBe(true);
  });
});
