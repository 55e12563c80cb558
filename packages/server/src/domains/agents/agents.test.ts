import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

let ts: TestServer;
let ws: TestWorkspace;
let other: TestWorkspace;
beforeAll(async () => {
  ts = await startTestServer();
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  other = await createTestWorkspace(ts, { creditsUsd: '10' });
});
afterAll(() => ts?.close());

const post = (path: string, json: unknown, key = ws.apiKey) => ts.api(path, { method: 'POST', key, json });
const patch = (path: string, json: unknown, key = ws.apiKey) => ts.api(path, { method: 'PATCH', key, json });
const get = (path: string, key = ws.apiKey) => ts.api(path, { key });
const del = (path: string, key = ws.apiKey) => ts.api(path, { method: 'DELETE', key });

async function createAgent(body: Record<string, unknown> = { name: 'Helper' }, key = ws.apiKey) {
  const res = await post('/managed-agents/agents', body, key);
  expect(res.status).toBe(201);
  return ((await res.json()) as { agent: { id: string } }).agent.id;
}

describe('agents', () => {
  it('creates an agent: 201 with id, name, appType, createdAt', async () => {
    const res = await post('/managed-agents/agents', { name: 'Support bot', prompt: 'Be kind.' });
    expect(res.status).toBe(201);
    const body = (await res.json()) as { agent: Record<string, unknown> };
    expect(Object.keys(body.agent).sort()).toEqual(['appType', 'createdAt', 'id', 'name']);
    expect(body.agent.appType).toBe('agent');
    expect(body.agent.name).toBe('Support bot');
  });

  it('answers 400 name is required for a missing or empty name', async () => {
    for (const body of [{}, { name: '' }, { name: '   ' }]) {
      const res = await post('/managed-agents/agents', body);
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toBe('name is required');
    }
  });

  it('requires an API key', async () => {
    const res = await ts.api('/managed-agents/agents');
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Invalid API key' });
  });

  it('merges the config over the platform defaults and returns the detail', async () => {
    const id = await createAgent({
      name: 'Researcher',
      config: { capabilities: { tools: { web_fetch: true } }, compute: { maxIterations: 3 } },
    });
    const res = await get(`/managed-agents/agents/${id}`);
    expect(res.status).toBe(200);
    const { agent } = (await res.json()) as { agent: Record<string, any> };
    expect(agent.mode).toBe('assist');
    expect(agent.businessUseCase).toBe('Managed agent');
    expect(agent.config.platformVersion).toBe(2);
    expect(agent.config.kind).toBe('agent');
    expect(agent.config.capabilities.tools).toEqual({
      web_search: false,
      web_fetch: true,
      web_provider: 'brave',
    });
    expect(agent.config.capabilities.memory).toEqual({ enabled: false, scope: 'agent' });
    expect(agent.config.compute).toEqual({ maxIterations: 3, maxWallClockMs: 120_000 });
    expect(typeof agent.modelId).toBe('string');
  });

  it('GET /managed-agents/config-defaults: what a create with no config stores', async () => {
    const res = await get('/managed-agents/config-defaults');
    expect(res.status).toBe(200);
    const { config } = (await res.json()) as { config: Record<string, any> };
    expect(config.capabilities.tools).toEqual({ web_search: false, web_fetch: false, web_provider: 'brave' });
    const id = await createAgent({ name: 'Plain' });
    const { agent } = (await (await get(`/managed-agents/agents/${id}`)).json()) as {
      agent: { config: unknown };
    };
    expect(agent.config).toEqual(config);
    expect((await ts.api('/managed-agents/config-defaults')).status).toBe(401);
  });

  it('lists agents of the workspace only, with appType agent and status', async () => {
    const mine = await createAgent({ name: 'Mine' });
    await createAgent({ name: 'Theirs' }, other.apiKey);
    const res = await get('/managed-agents/agents');
    const { agents } = (await res.json()) as { agents: Record<string, unknown>[] };
    expect(agents.some((a) => a.id === mine)).toBe(true);
    expect(agents.some((a) => a.name === 'Theirs')).toBe(false);
    for (const a of agents) {
      expect(a.appType).toBe('agent');
      expect(a.status).toBe('active');
      expect(Object.keys(a).sort()).toEqual(
        [
          'appType',
          'businessUseCase',
          'createdAt',
          'description',
          'id',
          'isPublic',
          'name',
          'status',
          'updatedAt',
        ].sort(),
      );
    }
  });

  it('answers 404 Agent not found for unknown, malformed and foreign ids', async () => {
    const foreign = await createAgent({ name: 'Foreign' }, other.apiKey);
    for (const id of ['00000000-0000-4000-8000-000000000000', 'not-a-uuid', foreign]) {
      for (const res of [
        await get(`/managed-agents/agents/${id}`),
        await patch(`/managed-agents/agents/${id}`, { name: 'x' }),
        await del(`/managed-agents/agents/${id}`),
      ]) {
        expect(res.status).toBe(404);
        expect(((await res.json()) as { error: string }).error).toBe('Agent not found');
      }
    }
  });

  it('patches only the sent fields, deep-merges config, replaces tools', async () => {
    const id = await createAgent({
      name: 'Patchy',
      description: 'before',
      config: { capabilities: { memory: { enabled: true } }, customTools: [{ name: 'a' }] },
    });
    let res = await patch(`/managed-agents/agents/${id}`, {
      config: { capabilities: { memory: { scope: 'workspace' } }, customTools: [{ name: 'b' }] },
      tools: [{ toolId: 'web_search' }],
      isPublic: true,
    });
    expect(res.status).toBe(200);
    let { agent } = (await res.json()) as { agent: Record<string, any> };
    expect(agent.name).toBe('Patchy');
    expect(agent.description).toBe('before');
    expect(agent.isPublic).toBe(true);
    expect(agent.config.capabilities.memory).toEqual({ enabled: true, scope: 'workspace' });
    expect(agent.config.customTools).toEqual([{ name: 'b' }]);
    expect(agent.tools).toEqual([{ toolId: 'web_search', enabled: true }]);

    res = await patch(`/managed-agents/agents/${id}`, { tools: [] });
    ({ agent } = (await res.json()) as { agent: Record<string, any> });
    expect(agent.tools).toEqual([]);
    expect(agent.config.capabilities.memory.scope).toBe('workspace');
  });

  it('validates integration bindings against the catalog', async () => {
    const id = await createAgent({ name: 'Bound' });
    let res = await patch(`/managed-agents/agents/${id}`, {
      integrationBindings: [{ packId: 'nope', workspaceIntegrationId: 'wi_1' }],
    });
    expect(res.status).toBe(400);
    res = await patch(`/managed-agents/agents/${id}`, { integrationBindings: [{ packId: 'helpdesk' }] });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe('workspaceIntegrationId is required');
    res = await patch(`/managed-agents/agents/${id}`, {
      integrationBindings: [
        { packId: 'helpdesk', workspaceIntegrationId: 'wi_1', enabledSkillIds: ['nope'] },
      ],
    });
    expect(res.status).toBe(400);
    res = await patch(`/managed-agents/agents/${id}`, {
      integrationBindings: [{ packId: 'helpdesk', workspaceIntegrationId: 'wi_1' }],
    });
    expect(res.status).toBe(200);
    const { agent } = (await res.json()) as { agent: { integrationBindings: unknown[] } };
    expect(agent.integrationBindings).toEqual([
      { packId: 'helpdesk', workspaceIntegrationId: 'wi_1', enabled: true },
    ]);
  });

  it('deletes an agent', async () => {
    const id = await createAgent({ name: 'Doomed' });
    const res = await del(`/managed-agents/agents/${id}`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ deleted: true });
    expect((await get(`/managed-agents/agents/${id}`)).status).toBe(404);
  });
});

describe('sessions', () => {
  it('creates, lists with limit/offset/total, gets and deletes sessions', async () => {
    const agentId = await createAgent({ name: 'Sessions' });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await post(`/managed-agents/agents/${agentId}/sessions`, {
        metadata: { i },
        end_user_id: 'u1',
      });
      expect(res.status).toBe(201);
      const body = (await res.json()) as { session: Record<string, string> };
      expect(Object.keys(body.session).sort()).toEqual(['created_at', 'id', 'mount']);
      ids.push(body.session.id as string);
    }
    let res = await get(`/managed-agents/agents/${agentId}/sessions?limit=2&offset=1`);
    expect(res.status).toBe(200);
    const page = (await res.json()) as { sessions: Record<string, any>[]; total: number };
    expect(page.total).toBe(3);
    expect(page.sessions).toHaveLength(2);
    expect(page.sessions[0]?.context).toEqual({
      app_id: agentId,
      origin: { source: 'api' },
      kind: 'chat',
      end_user_id: 'u1',
    });

    res = await get(`/managed-agents/sessions/${ids[0]}`);
    const { session } = (await res.json()) as { session: Record<string, unknown> };
    expect(session).toMatchObject({ id: ids[0], app_id: agentId, title: null, last_message_at: null });

    res = await del(`/managed-agents/sessions/${ids[0]}`);
    expect(await res.json()).toEqual({ deleted: true });
    expect((await get(`/managed-agents/sessions/${ids[0]}`)).status).toBe(404);
    expect((await get(`/managed-agents/sessions/${ids[1]}`, other.apiKey)).status).toBe(404);
  });

  it('clamps limit to 1..100 and offset to >= 0, and refuses what is not a number', async () => {
    const agentId = await createAgent({ name: 'Limits' });
    for (const [q, message] of [
      ['limit=abc', 'limit must be a number'],
      ['offset=x', 'offset must be a number'],
    ]) {
      const res = await get(`/managed-agents/agents/${agentId}/sessions?${q}`);
      expect(res.status).toBe(400);
      expect((await res.json()).error).toBe(message);
    }
    for (const q of ['limit=0', 'limit=500', 'offset=-1', 'limit=2.7']) {
      const res = await get(`/managed-agents/agents/${agentId}/sessions?${q}`);
      expect(res.status).toBe(200);
    }
    const res = await get(`/managed-agents/agents/${agentId}/sessions?limit=100`);
    expect(res.status).toBe(200);
  });

  it('answers 404 Agent not found when creating a session on a foreign agent', async () => {
    const foreign = await createAgent({ name: 'F' }, other.apiKey);
    const res = await post(`/managed-agents/agents/${foreign}/sessions`, {});
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: string }).error).toBe('Agent not found');
  });
});
