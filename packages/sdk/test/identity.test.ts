import {
  createTestSession,
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '@ai-suite/server/test-harness';
import { startTestMcpServer } from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AiSuite,
  AuthenticationError,
  BadRequestError,
  ConflictError,
  NotFoundError,
  PermissionDeniedError,
} from '../src/index.js';

let ts: TestServer;
let ws: TestWorkspace;
let second: TestWorkspace;
beforeAll(async () => {
  ts = await startTestServer();
  ws = await createTestWorkspace(ts, { name: 'SDK identity A' });
  second = await createTestWorkspace(ts, { name: 'SDK identity B' });
});
afterAll(() => ts?.close());

describe('a client acting as a person (session token)', () => {
  it('signs in, manages API keys in its workspace, switches workspace, signs out', async () => {
    const owner = await createTestSession(ts, ws, { role: 'owner' });
    await createTestSession(ts, second, { role: 'admin', email: owner.email });
    const client = new AiSuite({ baseURL: ts.url, maxRetries: 0 });
    const signedIn = await client.auth.signIn({ email: owner.email, password: owner.password });
    expect(client.sessionToken).toBe(signedIn.token);
    expect(signedIn.workspace?.id).toBe(ws.workspaceId);
    expect((await client.auth.session()).user.email).toBe(owner.email);

    const created = await client.apiKeys.create({ name: 'from the sdk' });
    expect(created.key).toMatch(/^svc_ai_/);
    const listed = await client.apiKeys.list();
    expect(listed.apiKeys.map((k) => k.id)).toContain(created.apiKey.id);
    expect(listed.apiKeys[0]?.usage).toMatchObject({ requests: expect.any(Number) });
    // The new key works as an API key client.
    const keyClient = new AiSuite({ baseURL: ts.url, apiKey: created.key, maxRetries: 0 });
    expect((await keyClient.me()).workspace.id).toBe(ws.workspaceId);
    await client.apiKeys.revoke(created.apiKey.id);
    await expect(keyClient.models.list()).rejects.toBeInstanceOf(AuthenticationError);
    expect((await client.apiKeys.list({ includeRevoked: true })).apiKeys.map((k) => k.id)).toContain(
      created.apiKey.id,
    );
    await expect(client.apiKeys.revoke(second.keyId)).rejects.toBeInstanceOf(NotFoundError);

    // Switching rotates the token; the client adopts it and acts in the other workspace.
    const before = client.sessionToken;
    await client.auth.switchWorkspace(second.workspaceId);
    expect(client.sessionToken).not.toBe(before);
    const inSecond = await client.apiKeys.list();
    expect(inSecond.apiKeys.map((k) => k.id)).toContain(second.keyId);
    const stale = new AiSuite({ baseURL: ts.url, sessionToken: before, maxRetries: 0 });
    await expect(stale.auth.session()).rejects.toBeInstanceOf(AuthenticationError);

    const sessions = await client.auth.listSessions();
    expect(sessions.sessions.find((s) => s.current)?.workspaceId).toBe(second.workspaceId);
    await client.auth.signOut();
    expect(client.sessionToken).toBeUndefined();
    const old = new AiSuite({ baseURL: ts.url, sessionToken: signedIn.token, maxRetries: 0 });
    await expect(old.auth.session()).rejects.toBeInstanceOf(AuthenticationError);
  });

  it('gives typed errors: members, API keys, the key limit, bad credentials', async () => {
    const member = await createTestSession(ts, ws, { role: 'member' });
    const asMember = new AiSuite({ baseURL: ts.url, sessionToken: member.token, maxRetries: 0 });
    const denied = await asMember.apiKeys.list().catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(PermissionDeniedError);
    expect((denied as PermissionDeniedError).message).toMatch(/Insufficient permissions to create API keys/);

    const asKey = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, maxRetries: 0 });
    await expect(
      asKey.request({ method: 'GET', path: `/workspaces/${ws.workspaceId}/api-keys` }),
    ).rejects.toBeInstanceOf(AuthenticationError);

    const w = await createTestWorkspace(ts);
    const o = await createTestSession(ts, w, { role: 'owner' });
    const asOwner = new AiSuite({ baseURL: ts.url, sessionToken: o.token, maxRetries: 0 });
    for (let i = 0; i < 9; i++) await asOwner.apiKeys.create({ name: `k${i}` });
    await expect(asOwner.apiKeys.create()).rejects.toBeInstanceOf(BadRequestError);

    const anon = new AiSuite({ baseURL: ts.url, maxRetries: 0 });
    await expect(anon.auth.signIn({ email: o.email, password: 'wrong' })).rejects.toBeInstanceOf(
      AuthenticationError,
    );
    expect(anon.sessionToken).toBeUndefined();
  });

  it('manages members and invitations; a new person accepts through the SDK and leaves', async () => {
    const owner = await createTestSession(ts, ws, { role: 'owner' });
    const client = new AiSuite({ baseURL: ts.url, sessionToken: owner.token, maxRetries: 0 });
    const email = `sdk-${Date.now()}@example.com`;
    const inv = await client.members.invitations.create({ email, role: 'member' });
    expect(inv.url).toContain(inv.token);
    expect((await client.members.invitations.list()).invitations[0]?.id).toBe(inv.invitation.id);

    const newcomer = new AiSuite({ baseURL: ts.url, maxRetries: 0 });
    const preview = await newcomer.auth.previewInvitation(inv.token);
    expect(preview).toMatchObject({ email, role: 'member', accountExists: false });
    const joined = await newcomer.auth.acceptInvitation({ token: inv.token, password: 'newcomer password' });
    expect(newcomer.sessionToken).toBe(joined.token);
    expect(joined.workspace?.id).toBe(ws.workspaceId);
    await expect(
      newcomer.auth.acceptInvitation({ token: inv.token, password: 'x'.repeat(9) }),
    ).rejects.toBeInstanceOf(BadRequestError);

    const listed = await newcomer.members.list();
    expect(listed.members.find((m) => m.email === email)?.role).toBe('member');
    // A member cannot escalate.
    await expect(newcomer.members.setRole(joined.user.id, 'owner')).rejects.toBeInstanceOf(
      PermissionDeniedError,
    );
    const promoted = await client.members.setRole(joined.user.id, 'admin');
    expect(promoted.member.role).toBe('admin');
    // The last owner stays.
    const solo = await createTestWorkspace(ts);
    const soloOwner = await createTestSession(ts, solo, { role: 'owner' });
    const soloClient = new AiSuite({ baseURL: ts.url, sessionToken: soloOwner.token, maxRetries: 0 });
    await expect(soloClient.members.leave()).rejects.toBeInstanceOf(ConflictError);

    await newcomer.members.leave();
    await expect(newcomer.members.list()).rejects.toBeInstanceOf(PermissionDeniedError);
    const revoked = await client.members.invitations.create({ email: `other-${email}` });
    expect((await client.members.invitations.revoke(revoked.invitation.id)).invitation.status).toBe(
      'revoked',
    );
  });

  it('signs up only when the server allows it', async () => {
    const anon = new AiSuite({ baseURL: ts.url, maxRetries: 0 });
    await expect(
      anon.auth.signUp({ email: `s-${Date.now()}@example.com`, password: 'long enough pw' }),
    ).rejects.toBeInstanceOf(PermissionDeniedError);
  });
});

describe('client.toolServers', () => {
  it('connects, lists, disables and disconnects an MCP server; members and keys are refused', async () => {
    const mcp = await startTestMcpServer(undefined, {
      requireHeader: { name: 'X-Api-Token', value: 't0ken' },
    });
    const server = await startTestServer({ env: { OUTBOUND_ALLOWLIST: '127.0.0.1' } });
    try {
      const w = await createTestWorkspace(server);
      const owner = await createTestSession(server, w, { role: 'owner' });
      const member = await createTestSession(server, w, { role: 'member' });
      const client = new AiSuite({ baseURL: server.url, sessionToken: owner.token, maxRetries: 0 });
      const { toolServer } = await client.toolServers.connect({
        name: 'calc',
        url: mcp.url,
        authHeader: { name: 'X-Api-Token', value: 't0ken' },
      });
      expect(toolServer.tools.map((t) => t.name).sort()).toEqual(['add', 'fail']);
      await expect(client.toolServers.connect({ name: 'calc2', url: mcp.url })).rejects.toBeInstanceOf(
        BadRequestError,
      );
      const asMember = new AiSuite({ baseURL: server.url, sessionToken: member.token, maxRetries: 0 });
      expect((await asMember.toolServers.list()).toolServers.map((t) => t.id)).toEqual([toolServer.id]);
      await expect(asMember.toolServers.setEnabled(toolServer.id, false)).rejects.toBeInstanceOf(
        PermissionDeniedError,
      );
      expect((await client.toolServers.setEnabled(toolServer.id, false)).toolServer.enabled).toBe(false);
      await client.toolServers.disconnect(toolServer.id);
      await expect(client.toolServers.disconnect(toolServer.id)).rejects.toBeInstanceOf(NotFoundError);
      const asKey = new AiSuite({ baseURL: server.url, apiKey: w.apiKey, maxRetries: 0 });
      await expect(
        asKey.request({ method: 'GET', path: `/workspaces/${w.workspaceId}/tool-servers` }),
      ).rejects.toBeInstanceOf(AuthenticationError);
    } finally {
      await server.close();
      await mcp.close();
    }
  });
});
