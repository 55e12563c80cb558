import { createHmac } from 'node:crypto';
import { type HttpFixture, type RecordedHttpRequest, startHttpFixture } from '@ai-suite/testkit';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

/**
 * The fake model decides from the conversation: a task containing WRITE asks for a
 * deliverable (then answers once the tool result is in), LOOP always calls a tool, HANG never
 * answers, ASK calls the integrator-owned tool, anything else answers with text.
 */
function modelRouter(body: any) {
  const msgs = (body?.messages ?? []) as { role: string; content?: string }[];
  const task = String(msgs.filter((m) => m.role === 'user').at(-1)?.content ?? '');
  const sawTool = msgs.some((m) => m.role === 'tool');
  if (task.includes('HANG')) return { hang: true };
  if (task.includes('LOOP')) {
    return { toolCalls: [{ name: 'deliverable_write', arguments: '{"filename":"loop.md","content":"x"}' }] };
  }
  if (task.includes('ASK') && !sawTool) {
    return { toolCalls: [{ name: 'lookup_customer', arguments: '{"email":"a@example.com"}' }] };
  }
  if (task.includes('WRITE') && !sawTool) {
    return {
      text: 'Writing the report.',
      toolCalls: [
        {
          name: 'deliverable_write',
          arguments: JSON.stringify({ filename: 'report.md', content: '# Weekly report\n\nAll good.' }),
        },
      ],
    };
  }
  return { text: 'Done: the report is ready.' };
}

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let other: TestWorkspace;
let hook: HttpFixture;
let hookReplies: number[] = [];

beforeAll(async () => {
  // Like Python's http.server: reads Content-Length bytes, answers 411 to a chunked body.
  hook = await startHttpFixture(() => ({ status: hookReplies.shift() ?? 200, body: { ok: true } }), {
    requireContentLength: true,
  });
  ts = await startTestServerWithFakeModel({
    fake: { defaultReply: modelRouter },
    env: {
      OUTBOUND_ALLOWLIST: '127.0.0.1',
      RUN_POLL_INTERVAL_MS: '50',
      RUN_WEBHOOK_POLL_MS: '50',
      RUN_WEBHOOK_BACKOFF_MS: '20',
      RUN_POLL_HINT_MS: '1500',
    },
  });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  other = await createTestWorkspace(ts, { creditsUsd: '10' });
});
afterAll(async () => {
  await ts?.close();
  await hook?.close();
});

const post = (path: string, json: unknown, key = ws.apiKey) => ts.api(path, { method: 'POST', key, json });
const get = (path: string, key = ws.apiKey) => ts.api(path, { key });

async function createAgent(
  config: Record<string, unknown> = {},
  extra: Record<string, unknown> = {},
  key = ws.apiKey,
) {
  const res = await post(
    '/managed-agents/agents',
    {
      name: 'Reporter',
      prompt: 'You write reports.',
      config: { runtimeMode: 'autonomous', capabilities: { deliverables: { enabled: true } }, ...config },
      ...extra,
    },
    key,
  );
  expect(res.status).toBe(201);
  return ((await res.json()) as { agent: { id: string } }).agent.id;
}

async function createRun(agentId: string, body: Record<string, unknown>, key = ws.apiKey) {
  const res = await post(`/managed-agents/agents/${agentId}/runs`, body, key);
  expect(res.status).toBe(201);
  return (await res.json()) as { runId: string; sessionId: string; created_at: string };
}

type Detail = {
  run: { id: string; status: string; error: string | null; session_id: string; started_at: string | null };
  events: { id: string; sequence_number: number; event_type: string; payload: Record<string, any> }[];
  artifacts: { id: string; file_id: string; filename: string; mime_type: string; size_bytes: number }[];
};

async function waitRun(agentId: string, runId: string, until: (d: Detail) => boolean): Promise<Detail> {
  for (let i = 0; i < 400; i++) {
    const res = await get(`/managed-agents/agents/${agentId}/runs/${runId}`);
    expect(res.status).toBe(200);
    const d = (await res.json()) as Detail;
    if (until(d)) return d;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`run ${runId} never reached the expected state`);
}
const terminal = (d: Detail) => ['completed', 'failed', 'cancelled'].includes(d.run.status);

describe('create run: validation', () => {
  it('answers 400 Deliverables are disabled for this agent', async () => {
    const agentId = await createAgent({ capabilities: { deliverables: { enabled: false } } });
    const res = await post(`/managed-agents/agents/${agentId}/runs`, { task: 'x' });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: 'Deliverables are disabled for this agent',
      code: 'DELIVERABLES_DISABLED',
      details: {
        configField: 'capabilities.deliverables.enabled',
        enableWith: { config: { capabilities: { deliverables: { enabled: true } } } },
      },
    });
  });

  it('answers 400 for messaging-integration sources', async () => {
    const agentId = await createAgent();
    for (const source of ['slack', 'Discord', 'teams']) {
      const res = await post(`/managed-agents/agents/${agentId}/runs`, { task: 'x', metadata: { source } });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toBe(
        'Integration mentions must use the platform webhook',
      );
    }
    const ok = await post(`/managed-agents/agents/${agentId}/runs`, {
      task: 'hi',
      metadata: { source: 'api' },
    });
    expect(ok.status).toBe(201);
  });

  it('requires a task and the agent of the caller workspace', async () => {
    const agentId = await createAgent();
    const res = await post(`/managed-agents/agents/${agentId}/runs`, { task: '' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe('task is required');
    const foreign = await post(`/managed-agents/agents/${agentId}/runs`, { task: 'x' }, other.apiKey);
    expect(foreign.status).toBe(404);
    expect(await foreign.json()).toEqual({ error: 'Agent not found' });
    const { runId } = await createRun(agentId, { task: 'hello' });
    const peek = await get(`/managed-agents/agents/${agentId}/runs/${runId}`, other.apiKey);
    expect(peek.status).toBe(404);
    const list = await get(`/managed-agents/agents/${agentId}/runs`, other.apiKey);
    expect(list.status).toBe(404);
  });

  it('refuses a session of another agent and a webhook to a private address', async () => {
    const a = await createAgent();
    const b = await createAgent();
    const { sessionId } = await createRun(a, { task: 'hello' });
    const res = await post(`/managed-agents/agents/${b}/runs`, { task: 'x', sessionId });
    expect(res.status).toBe(404);
    for (const webhookUrl of [
      'http://10.0.0.7/hook',
      'http://169.254.169.254/latest',
      'file:///etc/passwd',
    ]) {
      const r = await post(`/managed-agents/agents/${a}/runs`, { task: 'x', webhookUrl });
      expect(r.status).toBe(400);
    }
  });
});

describe('autonomous execution', () => {
  it('runs a task to completion with an artifact stored as a deliverable of the run', async () => {
    const agentId = await createAgent();
    const created = await createRun(agentId, { task: 'WRITE the weekly report' });
    expect(created.runId).toMatch(/^[0-9a-f-]{36}$/);
    const session = (await (await get(`/managed-agents/sessions/${created.sessionId}`)).json()) as {
      session: { context?: { kind: string } };
    };
    expect(session.session).toBeTruthy();

    const d = await waitRun(agentId, created.runId, terminal);
    expect(d.run.status).toBe('completed');
    expect(d.run.session_id).toBe(created.sessionId);
    expect(d.run.started_at).not.toBeNull();
    const types = d.events.map((e) => e.event_type);
    expect(types[0]).toBe('run.started');
    expect(types).toContain('tool_call.started');
    expect(types).toContain('artifact.created');
    expect(types).toContain('message.completed');
    expect(types).not.toContain('message.delta');
    expect(types.at(-1)).toBe('run.completed');
    // Ids are strings (spec section 2); the numeric sequence orders them.
    for (const e of d.events) expect(e.id).toBe(String(e.sequence_number));
    const seqs = d.events.map((e) => e.sequence_number);
    expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
    expect(new Set(seqs).size).toBe(seqs.length);
    expect(d.artifacts).toHaveLength(1);
    const art = d.artifacts[0] as Detail['artifacts'][number];
    expect(art).toMatchObject({ filename: 'report.md', mime_type: 'text/markdown', size_bytes: 26 });

    // The deliverable is in workspace storage with type deliverable and sourceId = run id.
    const list = await get(`/workspaces/${ws.workspaceId}/storage?type=deliverables`);
    const files = ((await list.json()) as { files: Record<string, unknown>[] }).files;
    const file = files.find((f) => f.id === art.file_id);
    expect(file).toMatchObject({ type: 'deliverable', sourceId: created.runId, filename: 'report.md' });
    const content = await get(
      `/workspaces/${ws.workspaceId}/storage/content?fileId=${art.file_id}&fileType=deliverable`,
    );
    expect(content.status).toBe(200);
    expect(await content.text()).toBe('# Weekly report\n\nAll good.');
    // Not readable from another workspace.
    const theirs = await get(
      `/workspaces/${other.workspaceId}/storage/content?fileId=${art.file_id}&fileType=deliverable`,
      other.apiKey,
    );
    expect(theirs.status).toBe(404);

    // The session (kind deliverable_job) lists it; the session stream replays the same run.
    const sessions = (await (await get(`/managed-agents/agents/${agentId}/sessions`)).json()) as {
      sessions: { id: string; context: { kind: string } }[];
    };
    expect(sessions.sessions.find((s) => s.id === created.sessionId)?.context.kind).toBe('deliverable_job');
    const stream = await get(`/managed-agents/sessions/${created.sessionId}/runs/${created.runId}/stream`);
    expect(stream.headers.get('content-type')).toMatch(/text\/event-stream/);
    const sse = await stream.text();
    expect(sse).toContain('"type":"message.delta"');
    expect(sse).toContain('"type":"artifact.created"');
    expect(sse.trim().split('\n\n').at(-1)).toContain('"type":"run.completed"');
  });

  it('resumes the session stream after an event id taken from the run detail', async () => {
    const agentId = await createAgent();
    const created = await createRun(agentId, { task: 'WRITE the weekly report' });
    const d = await waitRun(agentId, created.runId, terminal);
    const mark = d.events.find((e) => e.event_type === 'artifact.created');
    expect(typeof mark?.id).toBe('string');
    const streamPath = `/managed-agents/sessions/${created.sessionId}/runs/${created.runId}/stream`;
    const viaHeader = await ts.api(streamPath, {
      key: ws.apiKey,
      headers: { 'last-event-id': String(mark?.id) },
    });
    const viaQuery = await get(`${streamPath}?after=${mark?.id}`);
    for (const res of [viaHeader, viaQuery]) {
      const ids = [...(await res.text()).matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
      expect(ids[0]).toBe((mark?.sequence_number ?? 0) + 1);
      expect(ids.at(-1)).toBe(d.events.at(-1)?.sequence_number);
    }
  });

  it('lists runs newest first, with limit validation', async () => {
    const agentId = await createAgent();
    const first = await createRun(agentId, { task: 'one' });
    const second = await createRun(agentId, { task: 'two' });
    const res = await get(`/managed-agents/agents/${agentId}/runs?limit=1`);
    expect(res.status).toBe(200);
    const { runs } = (await res.json()) as { runs: { id: string; task: string }[] };
    expect(runs.map((r) => r.id)).toEqual([second.runId]);
    const all = (await (await get(`/managed-agents/agents/${agentId}/runs`)).json()) as {
      runs: { id: string }[];
    };
    expect(all.runs.map((r) => r.id)).toEqual([second.runId, first.runId]);
    // Out of range is clamped like the spec's other lists (limit=0 → 1, 500 → 100).
    const one = (await (await get(`/managed-agents/agents/${agentId}/runs?limit=0`)).json()) as {
      runs: { id: string }[];
    };
    expect(one.runs.map((r) => r.id)).toEqual([second.runId]);
    expect((await get(`/managed-agents/agents/${agentId}/runs?limit=500`)).status).toBe(200);
    const bad = await get(`/managed-agents/agents/${agentId}/runs?limit=abc`);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toBe('limit must be a number');
  });

  it('creates one run for 20 concurrent posts with the same messageId', async () => {
    const agentId = await createAgent();
    const body = { task: 'hello', metadata: { messageId: 'msg-42', source: 'api' } };
    const results = await Promise.all(
      Array.from({ length: 20 }, () => post(`/managed-agents/agents/${agentId}/runs`, body)),
    );
    const bodies = await Promise.all(
      results.map((r) => r.json() as Promise<{ runId: string; sessionId: string }>),
    );
    expect(results.map((r) => r.status)).toEqual(Array(20).fill(201));
    expect(new Set(bodies.map((b) => b.runId)).size).toBe(1);
    expect(new Set(bodies.map((b) => b.sessionId)).size).toBe(1);
    const { runs } = (await (await get(`/managed-agents/agents/${agentId}/runs`)).json()) as {
      runs: unknown[];
    };
    expect(runs).toHaveLength(1);
    const em = ts.server.deps.em();
    const count = await em.execute<{ n: string }[]>('select count(*) as n from runs where app_id = ?', [
      agentId,
    ]);
    expect(Number(count[0]?.n)).toBe(1);
    const sessions = await em.execute<{ n: string }[]>(
      'select count(*) as n from agent_sessions where app_id = ?',
      [agentId],
    );
    expect(Number(sessions[0]?.n)).toBe(1);
    // Another key, or the same key on another agent, makes another run.
    const again = await createRun(agentId, { task: 'hello', metadata: { messageId: 'msg-43' } });
    expect(again.runId).not.toBe(bodies[0]?.runId);
    const otherAgent = await createAgent();
    const elsewhere = await createRun(otherAgent, body);
    expect(elsewhere.runId).not.toBe(bodies[0]?.runId);
  });

  it('cancels a running run through the session cancel endpoint; polling hints while live', async () => {
    const agentId = await createAgent();
    const before = ts.fake.requests.length;
    const { runId, sessionId } = await createRun(agentId, { task: 'HANG please' });
    await waitRun(agentId, runId, (d) => d.run.status === 'running');
    await ts.fake.waitForRequests(before + 1);
    const live = await get(`/managed-agents/agents/${agentId}/runs/${runId}`);
    expect(live.headers.get('x-poll-after-ms')).toBe('1500');
    expect(live.headers.get('retry-after')).toBe('2');

    const res = await post(`/managed-agents/sessions/${sessionId}/cancel`, { runId });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ runId, status: 'cancelled' });
    const d = await waitRun(agentId, runId, terminal);
    expect(d.run.status).toBe('cancelled');
    expect(d.events.at(-1)?.event_type).toBe('run.cancelled');
    const done = await get(`/managed-agents/agents/${agentId}/runs/${runId}`);
    expect(done.headers.get('x-poll-after-ms')).toBeNull();
    const again = await post(`/managed-agents/sessions/${sessionId}/cancel`, { runId });
    expect(again.status).toBe(400);
    expect(await again.json()).toEqual({ error: 'Run is cancelled' });
    // The upstream call was aborted.
    for (let i = 0; i < 200 && !ts.fake.requests.at(-1)?.aborted; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(ts.fake.requests.some((r) => r.aborted)).toBe(true);
  });

  it('fails with a clear error at maxIterations', async () => {
    const agentId = await createAgent({ compute: { maxIterations: 2 } });
    const { runId } = await createRun(agentId, { task: 'LOOP forever' });
    const d = await waitRun(agentId, runId, terminal);
    expect(d.run.status).toBe('failed');
    expect(d.run.error).toBe('maxIterations reached (2)');
    expect(d.events.at(-1)).toMatchObject({
      event_type: 'run.failed',
      payload: { error: 'maxIterations reached (2)' },
    });
    // Rewriting the same filename replaced the artifact instead of duplicating it.
    expect(d.artifacts.map((a) => a.filename)).toEqual(['loop.md']);
  });

  it('fails with a clear error at maxWallClockMs', async () => {
    const agentId = await createAgent({ compute: { maxWallClockMs: 1000 } });
    const { runId } = await createRun(agentId, { task: 'HANG slowly' });
    const d = await waitRun(agentId, runId, terminal);
    expect(d.run.status).toBe('failed');
    expect(d.run.error).toBe('maxWallClockMs exceeded (1000 ms)');
  });

  it('pauses on an integrator-owned tool call and resumes on its result', async () => {
    const agentId = await createAgent({
      customTools: [
        {
          name: 'lookup_customer',
          description: 'Looks a customer up',
          inputSchema: { type: 'object', properties: { email: { type: 'string' } } },
        },
      ],
    });
    const { runId, sessionId } = await createRun(agentId, { task: 'ASK about the customer' });
    const paused = await waitRun(agentId, runId, (d) =>
      d.events.some((e) => e.event_type === 'tool_call.pending'),
    );
    expect(paused.run.status).toBe('running');
    const pending = paused.events.find((e) => e.event_type === 'tool_call.pending');
    const hinted = await get(`/managed-agents/agents/${agentId}/runs/${runId}`);
    expect(hinted.headers.get('x-poll-after-ms')).toBe('3000');
    const res = await post(`/managed-agents/sessions/${sessionId}/tool-results`, {
      toolCallId: pending?.payload.toolCallId,
      result: { name: 'Ada' },
    });
    expect(res.status).toBe(200);
    const d = await waitRun(agentId, runId, terminal);
    expect(d.run.status).toBe('completed');
  });
});

/** Verified by the Standard Webhooks reference package, and by the deprecated header's recipe. */
function verifySignature(req: RecordedHttpRequest, secret: string) {
  expect(new Webhook(secret).verify(req.rawBody, req.headers as Record<string, string>)).toEqual(req.body);
  const legacySecret = `whsec_${Buffer.from(secret.slice(6), 'base64').toString('base64url')}`;
  const header = String(req.headers['x-aisuite-signature'] ?? '');
  const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header);
  expect(m).not.toBeNull();
  const mac = createHmac('sha256', legacySecret).update(`${m?.[1]}.${req.rawBody}`).digest('hex');
  expect(m?.[2]).toBe(mac);
}

describe('completion webhook', () => {
  it('is delivered once, signed, after retries with backoff', async () => {
    const agentId = await createAgent();
    const agent = (await (await get(`/managed-agents/agents/${agentId}`)).json()) as {
      agent: { callbackSecret: string };
    };
    hookReplies = [500, 503];
    const before = hook.requests.length;
    const { runId } = await createRun(agentId, {
      task: 'WRITE it',
      metadata: { webhookUrl: `${hook.url}/runs-done?k=1` },
    });
    await waitRun(agentId, runId, terminal);
    const em = ts.server.deps.em();
    let row: Record<string, unknown> | undefined;
    for (let i = 0; i < 400; i++) {
      row = (await em.execute('select * from autonomous_runs where run_id = ?', [runId]))[0];
      if (row?.webhook_status !== 'pending') break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(row?.webhook_status).toBe('delivered');
    expect(row?.webhook_attempts).toBe(3);
    // A later run finishing (and its own delivery) does not deliver the first one again.
    const later = await createRun(agentId, { task: 'hello', webhookUrl: `${hook.url}/second` });
    await waitRun(agentId, later.runId, terminal);
    for (let i = 0; i < 400 && !hook.requests.some((r) => r.path === '/second'); i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    const mine = hook.requests.slice(before).filter((r) => r.path === '/runs-done?k=1');
    expect(mine).toHaveLength(3);
    const delivered = mine[2] as RecordedHttpRequest;
    expect(delivered.method).toBe('POST');
    expect(delivered.headers['content-length']).toBe(String(Buffer.byteLength(delivered.rawBody)));
    expect(delivered.headers['x-aisuite-delivery']).toBe(runId);
    expect(delivered.body).toMatchObject({ type: 'run.completed', runId, status: 'completed', attempt: 3 });
    expect(delivered.body.artifacts).toHaveLength(1);
    verifySignature(delivered, agent.agent.callbackSecret);
    expect(new Set(mine.map((r) => r.headers['x-aisuite-delivery']))).toEqual(new Set([runId]));
    // One message id on every retry (Standard Webhooks), each attempt freshly signed.
    expect(new Set(mine.map((r) => r.headers['webhook-id']))).toEqual(new Set([runId]));
    expect(delivered.headers['x-aisuite-event']).toBe('run.completed');
    expect(hook.requests.filter((r) => r.path === '/second')).toHaveLength(1);
  });
});
