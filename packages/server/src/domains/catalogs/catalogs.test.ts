import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../test/harness.js';

let ts: TestServer;
beforeAll(async () => {
  ts = await startTestServer();
});
afterAll(() => ts?.close());

describe('integration packs (public)', () => {
  it('lists active packs ordered by name, without authentication', async () => {
    const res = await ts.api('/integration-packs');
    expect(res.status).toBe(200);
    const body = (await res.json()) as { packs: { id: string; name: string }[] };
    const names = body.packs.map((p) => p.name);
    expect(names).toEqual([...names].sort((a, b) => a.localeCompare(b, 'en')));
    expect(body.packs.map((p) => p.id)).not.toContain('legacy-chat-relay');
    expect(body.packs.length).toBeGreaterThanOrEqual(3);
    for (const p of body.packs) {
      expect(Object.keys(p).sort()).toEqual(
        ['description', 'id', 'name', 'recommendedPlatformTools', 'sessionContextFields', 'version'].sort(),
      );
    }
  });

  it('returns a pack with its tools and skills', async () => {
    const res = await ts.api('/integration-packs/helpdesk');
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      pack: { id: string };
      tools: { toolId: string; executionMode: string; inputSchema: object; outputSchema: object | null }[];
      skills: { skillId: string; enabledByDefault: boolean }[];
    };
    expect(body.pack.id).toBe('helpdesk');
    expect(body.tools.map((t) => t.executionMode)).toContain('hitl_deferred');
    expect(body.tools.every((t) => typeof t.inputSchema === 'object')).toBe(true);
    expect(body.skills.length).toBeGreaterThan(0);
  });

  it('answers 404 Pack not found for unknown and inactive packs', async () => {
    for (const id of ['nope', 'legacy-chat-relay']) {
      const res = await ts.api(`/integration-packs/${id}`);
      expect(res.status).toBe(404);
      expect(await res.json()).toEqual({ error: 'Pack not found' });
    }
  });
});

describe('platform tools (public)', () => {
  it('lists every tool with display metadata only', async () => {
    const res = await ts.api('/platform-tools');
    expect(res.status).toBe(200);
    const { tools } = (await res.json()) as { tools: Record<string, unknown>[] };
    expect(tools.map((t) => t.toolId)).toEqual(
      expect.arrayContaining([
        'web_search',
        'web_fetch',
        'memory_search',
        'memory_save',
        'deliverable_write',
      ]),
    );
    for (const t of tools) {
      expect(t).not.toHaveProperty('inputSchema');
      expect(t.executionKind).toBe('builtin');
    }
  });

  it('filters by runtimeMode and agentKind', async () => {
    const assist = (await (await ts.api('/platform-tools?runtimeMode=assist')).json()) as {
      tools: { toolId: string; runtimeModes: string[] }[];
    };
    expect(assist.tools.every((t) => t.runtimeModes.includes('assist'))).toBe(true);
    expect(assist.tools.map((t) => t.toolId)).not.toContain('deliverable_write');
    const auto = (await (await ts.api('/platform-tools?runtimeMode=autonomous')).json()) as {
      tools: { toolId: string }[];
    };
    expect(auto.tools.map((t) => t.toolId)).toContain('deliverable_write');
    const none = (await (await ts.api('/platform-tools?agentKind=workflow')).json()) as { tools: unknown[] };
    expect(none.tools).toEqual([]);
    const agent = (await (await ts.api('/platform-tools?agentKind=agent')).json()) as { tools: unknown[] };
    expect(agent.tools.length).toBe(5);
  });

  it('rejects an unknown runtimeMode with the standard error body', async () => {
    const res = await ts.api('/platform-tools?runtimeMode=sometimes');
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: string };
    expect(body.error).toBe('runtimeMode must be one of: assist, autonomous');
  });
});
