import { createTestWorkspace, startTestServerWithFakeModel } from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AiSuite,
  BadRequestError,
  NotFoundError,
  pollDelay,
  type RunDetail,
  RunPollTimeoutError,
} from '../src/index.js';

let ts: Awaited<ReturnType<typeof startTestServerWithFakeModel>>;
let client: AiSuite;
let agentId: string;
let seenHints: string[] = [];
let apiKey: string;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    fake: {
      defaultReply: (body: any) => {
        const msgs = (body?.messages ?? []) as { role: string; content?: string }[];
        const task = String(msgs.filter((m) => m.role === 'user').at(-1)?.content ?? '');
        if (task.includes('HANG')) return { hang: true };
        if (!msgs.some((m) => m.role === 'tool')) {
          return {
            toolCalls: [
              {
                name: 'deliverable_write',
                arguments: JSON.stringify({
                  filename: 'summary.csv',
                  mimeType: 'text/csv',
                  content: 'a,b\n1,2\n',
                }),
              },
            ],
          };
        }
        return { text: 'Saved summary.csv', delayMs: 100 };
      },
    },
    env: { RUN_POLL_INTERVAL_MS: '50', RUN_POLL_HINT_MS: '40' },
  });
  const ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  apiKey = ws.apiKey;
  // Records the poll hints the server sent, to check the SDK waited on them.
  const recordingFetch: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    const hint = res.headers.get('x-poll-after-ms');
    if (hint) seenHints.push(hint);
    return res;
  };
  client = new AiSuite({ baseURL: ts.url, apiKey: ws.apiKey, fetch: recordingFetch });
  const res = await ts.api('/managed-agents/agents', {
    method: 'POST',
    key: ws.apiKey,
    json: { name: 'SDK runs', config: { capabilities: { deliverables: { enabled: true } } } },
  });
  agentId = ((await res.json()) as { agent: { id: string } }).agent.id;
});
afterAll(() => ts?.close());

describe('client.runs', () => {
  it('createAndPoll resolves on completion, honouring the server poll hint; artifacts download', async () => {
    seenHints = [];
    const updates: string[] = [];
    // Without the hint the SDK would wait an hour between polls and the test would time out.
    const done = await client.runs.createAndPoll(
      agentId,
      { task: 'Summarise', metadata: { messageId: 'sdk-1' } },
      { intervalMs: 3_600_000, onUpdate: (d) => updates.push(d.run.status) },
    );
    expect(done.run.status).toBe('completed');
    expect(updates.at(-1)).toBe('completed');
    expect(seenHints.every((h) => h === '40')).toBe(true);
    expect(done.artifacts.map((a) => a.filename)).toEqual(['summary.csv']);

    const artifacts = await client.runs.artifacts(agentId, done.run.id);
    expect(artifacts).toHaveLength(1);
    const art = artifacts[0] as (typeof artifacts)[number];
    expect(art).toMatchObject({ filename: 'summary.csv', mime_type: 'text/csv', size_bytes: 8 });
    expect(new TextDecoder().decode(await art.bytes())).toBe('a,b\n1,2\n');
    const res = await art.download();
    expect(res.headers.get('content-type')).toMatch(/^text\/csv/);

    // The same messageId returns the same run.
    const again = await client.runs.create(agentId, { task: 'Summarise', metadata: { messageId: 'sdk-1' } });
    expect(again.runId).toBe(done.run.id);
    const { runs } = await client.runs.list(agentId, { limit: 10 });
    expect(runs.map((r) => r.id)).toContain(done.run.id);
  });

  it('create + poll; poll gives up after timeoutMs with the last state', async () => {
    const { runId } = await client.runs.create(agentId, { task: 'HANG forever' });
    const err = await client.runs
      .poll(agentId, runId, { timeoutMs: 0 })
      .then(() => null)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RunPollTimeoutError);
    expect(['pending', 'running']).toContain((err as RunPollTimeoutError).last?.run.status);
    let detail: RunDetail = await client.runs.get(agentId, runId);
    for (let i = 0; i < 400 && detail.run.status !== 'running'; i++) {
      await new Promise((r) => setTimeout(r, 25));
      detail = await client.runs.get(agentId, runId);
    }
    const cancel = await ts.api(`/managed-agents/sessions/${detail.run.session_id}/cancel`, {
      method: 'POST',
      key: apiKey,
      json: { runId },
    });
    expect(cancel.status).toBe(200);
    const ended = await client.runs.poll(agentId, runId, { intervalMs: 20 });
    expect(ended.run.status).toBe('cancelled');
    expect(ended.events.at(-1)?.event_type).toBe('run.cancelled');
    const last = ended.events.at(-1);
    const lastId: string | undefined = last?.id;
    expect(lastId).toBe(String(last?.sequence_number));
  });

  it('maps errors to typed classes', async () => {
    await expect(client.runs.create(agentId, { task: '' })).rejects.toBeInstanceOf(BadRequestError);
    await expect(client.runs.get(agentId, '00000000-0000-4000-8000-000000000000')).rejects.toBeInstanceOf(
      NotFoundError,
    );
    await expect(client.runs.create(agentId, { task: 'x', metadata: { source: 'slack' } })).rejects.toThrow(
      'Integration mentions must use the platform webhook',
    );
  });

  it('pollDelay reads X-Poll-After-Ms, then Retry-After, then the fallback', () => {
    expect(pollDelay(new Headers({ 'x-poll-after-ms': '250', 'retry-after': '9' }), 5)).toBe(250);
    expect(pollDelay(new Headers({ 'retry-after': '3' }), 5)).toBe(3000);
    expect(pollDelay(new Headers(), 5)).toBe(5);
  });
});
