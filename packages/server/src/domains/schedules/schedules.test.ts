import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

/**
 * Schedules through the REST API on one process: CRUD, validation, hostile callers, the
 * 50-per-agent bound, and ticks fired by the real ticker (a tick is made due by moving the
 * schedule's `next_run_at` into the past, so no test waits for a wall-clock minute).
 * The fake model answers, except to a task containing HANG.
 */
let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let other: TestWorkspace;
let agentId: string;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    fake: {
      defaultReply: (body: any) => {
        const msgs = (body?.messages ?? []) as { role: string; content?: string }[];
        const task = String(msgs.filter((m) => m.role === 'user').at(-1)?.content ?? '');
        return task.includes('HANG') ? { hang: true } : { text: `Done: ${task}` };
      },
    },
    env: { RUN_POLL_INTERVAL_MS: '50', SCHEDULE_POLL_INTERVAL_MS: '100' },
  });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  other = await createTestWorkspace(ts, { creditsUsd: '10' });
  agentId = await createAgent(ws.apiKey);
});
afterAll(async () => {
  await ts?.close();
});

type Schedule = {
  id: string;
  agentId: string;
  cron: string;
  timezone: string;
  task: string;
  enabled: boolean;
  overlap: 'skip' | 'queue';
  metadata: Record<string, string>;
  nextRunAt: string | null;
  lastRunAt: string | null;
  createdAt: string;
  updatedAt: string;
};
type Tick = { tickAt: string; trigger: string; status: string; runId: string | null; reason: string | null };
type Run = { id: string; status: string; error: string | null; metadata: Record<string, unknown> };

const call = (method: string, path: string, json?: unknown, key = ws.apiKey) =>
  ts.api(path, { method, key, json });

async function createAgent(key: string, deliverables = true) {
  const res = await call(
    'POST',
    '/managed-agents/agents',
    { name: 'Scheduled', config: { capabilities: { deliverables: { enabled: deliverables } } } },
    key,
  );
  expect(res.status).toBe(201);
  return ((await res.json()) as { agent: { id: string } }).agent.id;
}

async function createSchedule(body: Record<string, unknown>, agent = agentId, key = ws.apiKey) {
  const res = await call('POST', `/managed-agents/agents/${agent}/schedules`, body, key);
  expect(res.status, await res.clone().text()).toBe(201);
  return ((await res.json()) as { schedule: Schedule }).schedule;
}

const em = () => ts.server.deps.em();

/** Makes the schedule's next tick due at `at` (default: one second ago). */
async function makeDue(scheduleId: string, at?: string) {
  await em().execute(
    `update agent_schedules set next_run_at = coalesce(?::timestamptz, now() - interval '1 second') where id = ?`,
    [at ?? null, scheduleId],
  );
}

async function waitFor<T>(fn: () => Promise<T | undefined | false | null>, what: string): Promise<T> {
  for (let i = 0; i < 1200; i++) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function ticks(scheduleId: string, agent = agentId): Promise<Tick[]> {
  const res = await call('GET', `/managed-agents/agents/${agent}/schedules/${scheduleId}/ticks`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { ticks: Tick[] }).ticks;
}

async function runsOf(scheduleId: string, agent = agentId, key = ws.apiKey): Promise<Run[]> {
  const res = await call(
    'GET',
    `/managed-agents/agents/${agent}/runs?scheduleId=${scheduleId}`,
    undefined,
    key,
  );
  expect(res.status).toBe(200);
  return ((await res.json()) as { runs: Run[] }).runs;
}

async function runStatus(runId: string, agent = agentId, key = ws.apiKey) {
  const res = await call('GET', `/managed-agents/agents/${agent}/runs/${runId}`, undefined, key);
  return ((await res.json()) as { run: Run }).run;
}

describe('schedules: create, read, update, delete', () => {
  it('creates a schedule with its defaults and the next tick in its zone', async () => {
    const s = await createSchedule({ cron: '0 9 * * *', timezone: 'Europe/Berlin', task: 'Morning report' });
    expect(s).toMatchObject({
      agentId,
      cron: '0 9 * * *',
      timezone: 'Europe/Berlin',
      task: 'Morning report',
      enabled: true,
      overlap: 'skip',
      metadata: {},
      lastRunAt: null,
    });
    // 09:00 in Berlin is 08:00Z in winter, 07:00Z in summer.
    expect(s.nextRunAt).toMatch(/T0[78]:00:00\.000Z$/);
    expect(new Date(s.nextRunAt as string).getTime()).toBeGreaterThan(Date.now());
    const utc = await createSchedule({ cron: '30 6 * * 1', task: 'Weekly' });
    expect(utc.timezone).toBe('UTC');
    expect(new Date(utc.nextRunAt as string).getUTCDay()).toBe(1);

    const list = await call('GET', `/managed-agents/agents/${agentId}/schedules`);
    const ids = ((await list.json()) as { schedules: Schedule[] }).schedules.map((x) => x.id);
    expect(ids).toEqual(expect.arrayContaining([s.id, utc.id]));
    const one = await call('GET', `/managed-agents/agents/${agentId}/schedules/${s.id}`);
    expect(await one.json()).toEqual({ schedule: s });
  });

  it('pauses, resumes and changes a schedule; deletes it', async () => {
    const s = await createSchedule({ cron: '0 12 * * *', task: 'Noon', metadata: { team: 'ops' } });
    const path = `/managed-agents/agents/${agentId}/schedules/${s.id}`;
    let res = await call('PATCH', path, { enabled: false });
    let got = ((await res.json()) as { schedule: Schedule }).schedule;
    expect(got).toMatchObject({ enabled: false, nextRunAt: null, task: 'Noon', metadata: { team: 'ops' } });
    res = await call('PATCH', path, { enabled: true, cron: '15 3 * * *', task: 'Night', overlap: 'queue' });
    got = ((await res.json()) as { schedule: Schedule }).schedule;
    expect(got).toMatchObject({ enabled: true, cron: '15 3 * * *', task: 'Night', overlap: 'queue' });
    expect(got.nextRunAt).toMatch(/T03:15:00\.000Z$/);
    res = await call('PATCH', path, { timezone: 'Asia/Kolkata' });
    got = ((await res.json()) as { schedule: Schedule }).schedule;
    expect(got.nextRunAt).toMatch(/T21:45:00\.000Z$/);
    // A field that does not touch timing keeps the next tick.
    res = await call('PATCH', path, { task: 'Night report' });
    expect(((await res.json()) as { schedule: Schedule }).schedule.nextRunAt).toBe(got.nextRunAt);

    res = await call('DELETE', path);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ deleted: true });
    res = await call('GET', path);
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: 'Schedule not found' });
  });

  it('refuses bad cron, zones, intervals, metadata and an agent without deliverables (400, the reason)', async () => {
    const base = `/managed-agents/agents/${agentId}/schedules`;
    const cases: [Record<string, unknown>, string | RegExp][] = [
      [{ cron: '* * * * * *', task: 't' }, 'cron fires every 1 seconds; the minimum interval is 60 seconds'],
      [
        { cron: '*/10 * * * * *', task: 't' },
        'cron fires every 10 seconds; the minimum interval is 60 seconds',
      ],
      [{ cron: '61 * * * *', task: 't' }, /^Invalid cron expression: /],
      [{ cron: 'whenever', task: 't' }, /^Invalid cron expression: /],
      [
        { cron: '0 9 * * *', timezone: 'Mars/Olympus_Mons', task: 't' },
        'Unknown time zone: Mars/Olympus_Mons',
      ],
      [{ cron: '0 9 * * *', task: '' }, /task is required/],
      [{ cron: '0 9 * * *', task: 't', overlap: 'later' }, /overlap must be "skip" or "queue"/],
      [{ cron: '0 9 * * *', task: 't', metadata: { source: 'x' } }, /metadata may not set source/],
      [{ cron: '0 9 * * *', task: 't', metadata: { webhookUrl: 'ftp://x' } }, /webhookUrl must be an http/],
    ];
    for (const [body, message] of cases) {
      const res = await call('POST', base, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const err = ((await res.json()) as { error: string }).error;
      if (typeof message === 'string') expect(err).toBe(message);
      else expect(err).toMatch(message);
    }
    const s = await createSchedule({ cron: '0 9 * * *', task: 't' });
    const res = await call('PATCH', `${base}/${s.id}`, { cron: '*/5 * * * * *' });
    expect(res.status).toBe(400);
    expect(((await call('GET', `${base}/${s.id}`).then((r) => r.json())) as any).schedule.cron).toBe(
      '0 9 * * *',
    );

    const plain = await createAgent(ws.apiKey, false);
    const off = await call('POST', `/managed-agents/agents/${plain}/schedules`, {
      cron: '0 9 * * *',
      task: 't',
    });
    expect(off.status).toBe(400);
    expect(await off.json()).toMatchObject({
      error: 'Deliverables are disabled for this agent',
      code: 'DELIVERABLES_DISABLED',
    });
    await call('DELETE', `${base}/${s.id}`);
  });

  it('previews the next firings as a schedule would read them', async () => {
    const res = await call('POST', '/managed-agents/schedules/preview', {
      cron: '0 9 * * 1-5',
      timezone: 'America/New_York',
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { times: string[]; intervalSeconds: number };
    expect(body.times).toHaveLength(5);
    for (const t of body.times) expect(t).toMatch(/T1[34]:00:00\.000Z$/);
    expect(body.intervalSeconds).toBe(86_400);
    const bad = await call('POST', '/managed-agents/schedules/preview', { cron: '* * * * * *' });
    expect(bad.status).toBe(400);
  });
});

describe('schedules: hostile callers', () => {
  it("answers 404 for another workspace's agent or schedule, whatever the route", async () => {
    const mine = await createSchedule({ cron: '0 9 * * *', task: 'mine' });
    const theirAgent = await createAgent(other.apiKey);
    const theirs = await createSchedule({ cron: '0 9 * * *', task: 'theirs' }, theirAgent, other.apiKey);
    const attempts: [string, string, unknown?][] = [
      ['GET', `/managed-agents/agents/${agentId}/schedules`],
      ['POST', `/managed-agents/agents/${agentId}/schedules`, { cron: '0 9 * * *', task: 'x' }],
      ['GET', `/managed-agents/agents/${agentId}/schedules/${mine.id}`],
      ['PATCH', `/managed-agents/agents/${agentId}/schedules/${mine.id}`, { enabled: false }],
      ['DELETE', `/managed-agents/agents/${agentId}/schedules/${mine.id}`],
      ['POST', `/managed-agents/agents/${agentId}/schedules/${mine.id}/run`, {}],
      ['GET', `/managed-agents/agents/${agentId}/schedules/${mine.id}/ticks`],
      // Their own agent with my schedule id.
      ['GET', `/managed-agents/agents/${theirAgent}/schedules/${mine.id}`],
      ['PATCH', `/managed-agents/agents/${theirAgent}/schedules/${mine.id}`, { task: 'stolen' }],
      ['DELETE', `/managed-agents/agents/${theirAgent}/schedules/${mine.id}`],
      ['POST', `/managed-agents/agents/${theirAgent}/schedules/${mine.id}/run`, {}],
      ['GET', `/managed-agents/agents/${theirAgent}/schedules/not-a-uuid`],
    ];
    for (const [method, path, json] of attempts) {
      const res = await call(method, path, json, other.apiKey);
      expect(res.status, `${method} ${path}`).toBe(404);
    }
    // My agent with their schedule id.
    const res = await call('GET', `/managed-agents/agents/${agentId}/schedules/${theirs.id}`);
    expect(res.status).toBe(404);
    // Nothing changed or ran.
    const still = await call('GET', `/managed-agents/agents/${agentId}/schedules/${mine.id}`);
    expect(((await still.json()) as { schedule: Schedule }).schedule).toEqual(mine);
    expect(await runsOf(mine.id)).toEqual([]);
    // Their runs list filtered by my schedule: nothing of mine.
    expect(await runsOf(mine.id, theirAgent, other.apiKey)).toEqual([]);
    const malformed = await call('GET', `/managed-agents/agents/${agentId}/runs?scheduleId=nope`);
    expect(malformed.status).toBe(400);
  });

  it('holds an agent to 50 schedules, also under concurrent creates', async () => {
    const agent = await createAgent(ws.apiKey);
    const created: string[] = [];
    for (let i = 0; i < 47; i++)
      created.push((await createSchedule({ cron: '0 9 * * *', task: `n${i}` }, agent)).id);
    // Six concurrent creates for the last three places.
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        call('POST', `/managed-agents/agents/${agent}/schedules`, { cron: '0 9 * * *', task: `c${i}` }),
      ),
    );
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 201, 201, 400, 400, 400]);
    const refused = results.find((r) => r.status === 400) as Response;
    expect(await refused.json()).toMatchObject({
      error: 'An agent has at most 50 schedules',
      code: 'TOO_MANY_SCHEDULES',
    });
    const list = await call('GET', `/managed-agents/agents/${agent}/schedules`);
    expect(((await list.json()) as { schedules: Schedule[] }).schedules).toHaveLength(50);
    // Deleting one frees a place.
    await call('DELETE', `/managed-agents/agents/${agent}/schedules/${created[0]}`);
    await createSchedule({ cron: '0 9 * * *', task: 'again' }, agent);
    await call('DELETE', `/managed-agents/agents/${agent}`);
  });
});

describe('schedules: ticks', { timeout: 120_000 }, () => {
  it('a due tick starts one run tagged with the schedule; after downtime only one missed tick runs', async () => {
    // Yearly: while the test runs no real tick comes.
    const s = await createSchedule({
      cron: '0 0 1 1 *',
      task: 'New year summary',
      metadata: { team: 'ops' },
    });
    // As if the server had been down since before 1 January 2025: two yearly ticks missed.
    await makeDue(s.id, '2025-01-01T00:00:00Z');
    const [run] = await waitFor(async () => {
      const r = await runsOf(s.id);
      return r.length > 0 && r;
    }, 'the tick run');
    expect(run?.metadata).toEqual({
      team: 'ops',
      source: 'schedule',
      scheduleId: s.id,
      scheduleTickAt: '2025-01-01T00:00:00.000Z',
    });
    const done = await waitFor(async () => {
      const r = await runStatus(run?.id as string);
      return r.status === 'completed' && r;
    }, 'the run to complete');
    expect(done.status).toBe('completed');
    // One tick fired; the schedule moved past now (the 2026 tick was not run).
    const history = await ticks(s.id);
    expect(history).toEqual([
      expect.objectContaining({
        tickAt: '2025-01-01T00:00:00.000Z',
        trigger: 'schedule',
        status: 'started',
        runId: run?.id,
      }),
    ]);
    const after = (
      (await call('GET', `/managed-agents/agents/${agentId}/schedules/${s.id}`).then((r) => r.json())) as any
    ).schedule as Schedule;
    expect(new Date(after.nextRunAt as string).getTime()).toBeGreaterThan(Date.now());
    expect(after.nextRunAt).toMatch(/-01-01T00:00:00\.000Z$/);
    expect(after.lastRunAt).toBe('2025-01-01T00:00:00.000Z');
    // The run is among the agent's runs, and only it matches the filter.
    expect((await runsOf(s.id)).map((r) => r.id)).toEqual([run?.id]);
  });

  it('overlap "skip" records a skipped tick while the previous run is live; "queue" starts anyway', async () => {
    const skip = await createSchedule({ cron: '0 0 1 1 *', task: 'HANG skip', overlap: 'skip' });
    const queue = await createSchedule({ cron: '0 0 1 1 *', task: 'HANG queue', overlap: 'queue' });
    for (const s of [skip, queue]) await makeDue(s.id, '2025-01-01T00:00:00Z');
    await waitFor(
      async () => (await runsOf(skip.id)).length === 1 && (await runsOf(queue.id)).length === 1,
      'first runs',
    );
    const firstSkipRun = (await runsOf(skip.id))[0] as Run;
    await waitFor(async () => (await runStatus(firstSkipRun.id)).status === 'running', 'the run to be live');
    for (const s of [skip, queue]) await makeDue(s.id, '2025-06-01T00:00:00Z');
    await waitFor(
      async () => (await ticks(skip.id)).length === 2 && (await ticks(queue.id)).length === 2,
      'second ticks',
    );
    expect((await ticks(skip.id))[0]).toMatchObject({
      tickAt: '2025-06-01T00:00:00.000Z',
      status: 'skipped',
      runId: null,
      reason: 'The previous run of the schedule is still running',
    });
    expect(await runsOf(skip.id)).toHaveLength(1);
    expect((await ticks(queue.id))[0]).toMatchObject({
      tickAt: '2025-06-01T00:00:00.000Z',
      status: 'started',
    });
    expect(await runsOf(queue.id)).toHaveLength(2);
    // Stop the hanging runs.
    for (const s of [skip, queue]) {
      for (const r of await runsOf(s.id)) {
        const detail = await runStatus(r.id);
        await call('POST', `/managed-agents/sessions/${(detail as any).session_id}/cancel`, { runId: r.id });
      }
    }
  });

  it('a workspace out of credits gets a failed run for the tick, not a silent skip; run now answers 402', async () => {
    const poor = await createTestWorkspace(ts);
    const agent = await createAgent(poor.apiKey);
    const s = await createSchedule({ cron: '0 0 1 1 *', task: 'No money' }, agent, poor.apiKey);
    await makeDue(s.id, '2025-01-01T00:00:00Z');
    const [run] = await waitFor(async () => {
      const r = await runsOf(s.id, agent, poor.apiKey);
      return r.length > 0 && r;
    }, 'the failed run');
    const detail = await runStatus(run?.id as string, agent, poor.apiKey);
    expect(detail.status).toBe('failed');
    expect(detail.error).toMatch(/credit/i);
    const history = await waitFor(async () => {
      const res = await call(
        'GET',
        `/managed-agents/agents/${agent}/schedules/${s.id}/ticks`,
        undefined,
        poor.apiKey,
      );
      const t = ((await res.json()) as { ticks: Tick[] }).ticks;
      return t.length > 0 && t;
    }, 'the tick');
    expect(history[0]).toMatchObject({ status: 'failed', runId: run?.id, reason: detail.error });
    const now = await call('POST', `/managed-agents/agents/${agent}/schedules/${s.id}/run`, {}, poor.apiKey);
    expect(now.status).toBe(402);
  });

  it('run now starts a run of a paused schedule, recorded as manual', async () => {
    const s = await createSchedule({ cron: '0 0 1 1 *', task: 'On demand', enabled: false });
    expect(s.nextRunAt).toBeNull();
    const res = await call('POST', `/managed-agents/agents/${agentId}/schedules/${s.id}/run`, {});
    expect(res.status).toBe(201);
    const body = (await res.json()) as { runId: string; sessionId: string; created_at: string };
    expect(Object.keys(body).sort()).toEqual(['created_at', 'runId', 'sessionId']);
    const done = await waitFor(async () => {
      const r = await runStatus(body.runId);
      return r.status === 'completed' && r;
    }, 'the run');
    expect(done.metadata).toMatchObject({ source: 'schedule', scheduleId: s.id });
    expect(await ticks(s.id)).toEqual([
      expect.objectContaining({ trigger: 'manual', status: 'started', runId: body.runId }),
    ]);
    const got = (
      (await call('GET', `/managed-agents/agents/${agentId}/schedules/${s.id}`).then((r) => r.json())) as any
    ).schedule as Schedule;
    expect(got.lastRunAt).not.toBeNull();
    expect(got.enabled).toBe(false);
  });

  it('a tick of an agent whose deliverables were turned off is recorded as failed, with no run', async () => {
    const agent = await createAgent(ws.apiKey);
    const s = await createSchedule({ cron: '0 0 1 1 *', task: 'x' }, agent);
    const patch = await call('PATCH', `/managed-agents/agents/${agent}`, {
      config: { capabilities: { deliverables: { enabled: false } } },
    });
    expect(patch.status).toBe(200);
    await makeDue(s.id, '2025-01-01T00:00:00Z');
    const history = await waitFor(async () => {
      const t = await ticks(s.id, agent);
      return t.length > 0 && t;
    }, 'the tick');
    expect(history[0]).toMatchObject({
      status: 'failed',
      runId: null,
      reason: 'Deliverables are disabled for this agent',
    });
    expect(await runsOf(s.id, agent)).toEqual([]);
  });
});
