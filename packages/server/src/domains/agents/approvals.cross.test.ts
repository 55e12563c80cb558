import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type HttpFixture, startHttpFixture } from '@ai-suite/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  type FakeOpenAI,
  fakeOpenAIEnv,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { spawnServerProcess } from '../../test/spawn.js';
import { createAgentWithSession, openTurn } from './test-helpers.js';

/**
 * Tool approval across processes (issue 42): two server processes on one PostgreSQL database.
 * The turn streams from this process; the decision is posted to the other one (its own OS
 * process, `src/main.ts`), and the parked run resumes wherever it is claimed, running the tool
 * once, with the approved arguments.
 */

const serverDb = Boolean(process.env.DATABASE_URL);

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let callbacks: HttpFixture;
let child: ChildProcess | undefined;
let otherUrl = '';
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-approvals-'));

beforeAll(async () => {
  if (!serverDb) return;
  callbacks = await startHttpFixture((req) => ({ body: { result: { done: req.body?.arguments } } }));
  const env = { OUTBOUND_ALLOWLIST: '127.0.0.1', RUN_POLL_INTERVAL_MS: '100' };
  ts = await startTestServerWithFakeModel({ env });
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
  child = spawnServerProcess({
    ...fakeOpenAIEnv(ts.fake),
    ...env,
    DATABASE_URL: ts.db.databaseUrl,
    DATA_DIR: dataDir,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
  });
  let out = '';
  child.stdout?.on('data', (d) => {
    out += d.toString();
  });
  child.stderr?.on('data', (d) => {
    out += d.toString();
  });
  const deadline = Date.now() + 240_000; // a server process starting under heavy load
  while (!/"url":"(http:\/\/[^"]+)"/.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`the server did not start:\n${out}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  otherUrl = /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1] as string;
}, 300_000);

afterAll(async () => {
  if (child && child.exitCode === null) {
    child.kill('SIGTERM');
    await new Promise((r) => child?.once('exit', r));
  }
  await ts?.close();
  await callbacks?.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
}, 60_000);

async function decideOnOther(sessionId: string, body: Record<string, unknown>) {
  const res = await fetch(`${otherUrl}/api/v1/managed-agents/sessions/${sessionId}/tool-approvals`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ws.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as any };
}

describe.skipIf(!serverDb)('tool approval with two server processes', { timeout: 240_000 }, () => {
  it('an approval posted to the other process resumes the turn; the tool runs once', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Two processes',
      config: {
        customTools: [
          {
            name: 'send_invoice',
            inputSchema: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] },
            callbackUrl: `${callbacks.url}/invoice`,
          },
        ],
        toolApproval: ['send_invoice'],
      },
    });
    ts.fake.script(
      { toolCalls: [{ id: 'p1', name: 'send_invoice', arguments: '{"to":"a@example.com"}' }] },
      { text: 'Invoice sent.' },
    );
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Invoice them' });
    const { toolCallId } = (await turn.until('tool_call.approval_required')).data;
    expect(callbacks.requests).toHaveLength(0);
    // Hostile on the other process too: arguments breaking the schema, nothing runs.
    const bad = await decideOnOther(sessionId, { toolCallId, approved: true, arguments: { to: 7 } });
    expect(bad).toMatchObject({ status: 400, body: { code: 'INVALID_ARGUMENTS' } });
    const ok = await decideOnOther(sessionId, {
      toolCallId,
      approved: true,
      arguments: { to: 'b@example.com' },
    });
    expect(ok).toEqual({ status: 200, body: { accepted: true, sessionId, toolCallId, status: 'approved' } });
    const events = await turn.rest();
    expect(events.at(-1)?.data.type).toBe('run.completed');
    expect(events.find((e) => e.data.type === 'message.completed')?.data.content).toBe('Invoice sent.');
    expect(callbacks.requests.map((r) => r.body.arguments)).toEqual([{ to: 'b@example.com' }]);
    // Decided: refused on either process.
    expect((await decideOnOther(sessionId, { toolCallId, approved: true })).status).toBe(409);
    const again = await ts.api(`/managed-agents/sessions/${sessionId}/tool-approvals`, {
      method: 'POST',
      key: ws.apiKey,
      json: { toolCallId, approved: false },
    });
    expect(again.status).toBe(409);
    expect(callbacks.requests).toHaveLength(1);
  });

  it('a denial posted to the other process: the model is told why, nothing runs', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Denied across',
      config: {
        customTools: [{ name: 'wipe_disk', callbackUrl: `${callbacks.url}/wipe` }],
        toolApproval: ['*'],
      },
    });
    ts.fake.script(
      { toolCalls: [{ id: 'q1', name: 'wipe_disk', arguments: '{}' }] },
      { text: 'Understood.' },
    );
    const before = callbacks.requests.length;
    const turn = await openTurn(ts, ws.apiKey, sessionId, { message: 'Wipe it' });
    const { toolCallId } = (await turn.until('tool_call.approval_required')).data;
    const r = await decideOnOther(sessionId, { toolCallId, approved: false, reason: 'Never' });
    expect(r.body).toMatchObject({ status: 'denied' });
    const events = await turn.rest();
    expect(events.at(-1)?.data.type).toBe('run.completed');
    expect(ts.fake.requests.at(-1)?.body.messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'q1',
      content: JSON.stringify({ error: 'A person declined this tool call: Never' }),
    });
    expect(callbacks.requests.length).toBe(before);
  });
});
