import { createTestWorkspace, startTestServerWithFakeModel } from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AiSuite, BadRequestError, NotFoundError } from '../src/index.js';

let ts: Awaited<ReturnType<typeof startTestServerWithFakeModel>>;
let client: AiSuite;
let agentId: string;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    fake: { defaultReply: { text: 'Scheduled report written.' } },
    env: { RUN_POLL_INTERVAL_MS: '50', RUN_POLL_HINT_MS: '40', SCHEDULE_POLL_INTERVAL_MS: '0' },
  });
  const ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey });
  const { agent } = await client.agents.create({
    name: 'SDK schedules',
    config: { capabilities: { deliverables: { enabled: true } } },
  });
  agentId = agent.id;
});
afterAll(() => ts?.close());

describe('client.agents.schedules', () => {
  it('creates, lists, pauses, resumes, runs now, reads history, filters runs, deletes', async () => {
    const { schedule } = await client.agents.schedules.create(agentId, {
      cron: '0 8 * * 1-5',
      timezone: 'Europe/Paris',
      task: 'Weekday briefing',
      metadata: { team: 'sales' },
    });
    expect(schedule).toMatchObject({ enabled: true, overlap: 'skip', timezone: 'Europe/Paris' });
    expect(schedule.nextRunAt).not.toBeNull();

    const all = [];
    for await (const s of client.agents.schedules.list(agentId)) all.push(s.id);
    expect(all).toEqual([schedule.id]);

    const paused = await client.agents.schedules.pause(agentId, schedule.id);
    expect(paused.schedule).toMatchObject({ enabled: false, nextRunAt: null });
    const resumed = await client.agents.schedules.resume(agentId, schedule.id);
    expect(resumed.schedule.nextRunAt).not.toBeNull();
    const changed = await client.agents.schedules.update(agentId, schedule.id, { overlap: 'queue' });
    expect(changed.schedule.overlap).toBe('queue');

    const started = await client.agents.schedules.run(agentId, schedule.id);
    const done = await client.runs.poll(agentId, started.runId);
    expect(done.run.status).toBe('completed');
    expect(done.run.metadata).toMatchObject({ source: 'schedule', scheduleId: schedule.id, team: 'sales' });
    const { ticks } = await client.agents.schedules.ticks(agentId, schedule.id);
    expect(ticks).toEqual([
      expect.objectContaining({ trigger: 'manual', status: 'started', runId: started.runId }),
    ]);

    // A run not from the schedule is left out of the filtered list.
    await client.runs.create(agentId, { task: 'Unscheduled' });
    const filtered = await client.runs.list(agentId, { scheduleId: schedule.id });
    expect(filtered.runs.map((r) => r.id)).toEqual([started.runId]);

    expect(await client.agents.schedules.delete(agentId, schedule.id)).toEqual({ deleted: true });
    await expect(client.agents.schedules.get(agentId, schedule.id)).rejects.toBeInstanceOf(NotFoundError);
  });

  it('previews an expression; refuses one firing below the minimum with the reason', async () => {
    const preview = await client.agents.schedules.preview({ cron: '*/15 * * * *', count: 3 });
    expect(preview.times).toHaveLength(3);
    expect(preview.intervalSeconds).toBe(900);
    const err = await client.agents.schedules
      .create(agentId, { cron: '*/5 * * * * *', task: 'too often' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BadRequestError);
    expect((err as BadRequestError).message).toBe(
      'cron fires every 5 seconds; the minimum interval is 60 seconds',
    );
  });
});
