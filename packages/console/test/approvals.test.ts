import {
  createTestSession,
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestSession,
  type TestWorkspace,
} from '@ai-suite/server/test-harness';
import { type HttpFixture, startHttpFixture } from '@ai-suite/testkit';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectAccessible, launch, openConsole, signIn } from './browser.js';

/**
 * Tool approval in the console (issue 42): a call of a tool the agent's `toolApproval` names
 * waits in the session view with Approve / Deny; the arguments can be edited before approving;
 * the agent's page lists what waits for a decision.
 */
let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let owner: TestSession;
let browser: Browser;
let callbacks: HttpFixture;

beforeAll(async () => {
  callbacks = await startHttpFixture((req) => ({ body: { result: { transferred: req.body?.arguments } } }));
  ts = await startTestServerWithFakeModel({ env: { OUTBOUND_ALLOWLIST: '127.0.0.1' } });
  ws = await createTestWorkspace(ts, { name: 'Acme', creditsUsd: '5' });
  owner = await createTestSession(ts, ws, { role: 'owner', email: 'ada@example.com' });
  browser = await launch();
});

afterAll(async () => {
  await browser?.close();
  await ts?.close();
  await callbacks?.close();
});

describe('tool approval', () => {
  it('approves a call with edited arguments and denies another, in the session view', async () => {
    const created = await ts.api('/managed-agents/agents', {
      method: 'POST',
      key: ws.apiKey,
      json: {
        name: 'Treasurer',
        config: {
          customTools: [
            {
              name: 'transfer',
              inputSchema: {
                type: 'object',
                properties: { amount: { type: 'number', maximum: 100 } },
                required: ['amount'],
              },
              callbackUrl: `${callbacks.url}/transfer`,
            },
          ],
          toolApproval: ['transfer'],
        },
      },
    });
    const agentId = ((await created.json()) as { agent: { id: string } }).agent.id;
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await signIn(page, owner.email, owner.password);
      await page.goto(`${ts.url}/agents/${agentId}`);
      await page.getByRole('heading', { name: 'Agent: Treasurer' }).waitFor();
      await page.getByText('No tool call is waiting for a decision.').waitFor();
      await page.getByRole('button', { name: 'New session' }).click();
      await page.getByRole('heading', { name: 'Agent session' }).waitFor();
      const sessionUrl = page.url();

      ts.fake.script(
        { toolCalls: [{ id: 't1', name: 'transfer', arguments: '{"amount":500}' }] },
        { text: 'Transferred 50.' },
      );
      await page.getByLabel('Message to the agent').fill('Pay the supplier');
      await page.getByRole('button', { name: 'Send' }).click();
      const card = page.getByTestId('approval');
      await expect.poll(() => card.getByTestId('approval-status').textContent()).toBe('pending');
      expect(callbacks.requests).toHaveLength(0);
      await expectAccessible(page, 'approval in a session');

      // The agent's page lists it (another tab of the same person).
      const other = await context.newPage();
      await other.goto(`${ts.url}/agents/${agentId}`);
      await expect.poll(() => other.getByTestId('pending-approvals').textContent()).toContain('transfer');
      await other.close();

      // Arguments breaking the tool's schema are refused and nothing runs.
      const args = page.getByLabel('Arguments (JSON, editable)');
      await args.fill('{"amount": 250}');
      await page.getByRole('button', { name: 'Approve' }).click();
      await expect.poll(() => card.textContent()).toContain("arguments do not match the tool's inputSchema");
      expect(callbacks.requests).toHaveLength(0);
      await args.fill('{"amount": 50}');
      await page.getByRole('button', { name: 'Approve' }).click();
      await page.getByTestId('timeline-assistant').filter({ hasText: 'Transferred 50.' }).waitFor();
      await expect.poll(() => card.getByTestId('approval-status').textContent()).toBe('approved');
      expect(callbacks.requests.map((r) => r.body.arguments)).toEqual([{ amount: 50 }]);

      // A second call, denied with a reason: the model is told, nothing runs.
      ts.fake.script(
        { toolCalls: [{ id: 't2', name: 'transfer', arguments: '{"amount":90}' }] },
        { text: 'Understood, no transfer.' },
      );
      await page.getByLabel('Message to the agent').fill('Pay again');
      await page.getByRole('button', { name: 'Send' }).click();
      const second = page.getByTestId('approval').nth(1);
      await expect.poll(() => second.getByTestId('approval-status').textContent()).toBe('pending');
      await page.getByLabel('Reason for a denial (optional)').fill('Already paid');
      await page.getByRole('button', { name: 'Deny' }).click();
      await page.getByTestId('timeline-assistant').filter({ hasText: 'Understood, no transfer.' }).waitFor();
      await expect.poll(() => second.getByTestId('approval-status').textContent()).toBe('denied');
      await expect.poll(() => second.textContent()).toContain('Already paid');
      expect(callbacks.requests).toHaveLength(1);
      expect(ts.fake.requests.at(-1)?.body.messages.at(-1).content).toBe(
        JSON.stringify({ error: 'A person declined this tool call: Already paid' }),
      );
      // After a reload the timeline still says how each was decided.
      await page.goto(sessionUrl);
      await expect
        .poll(() => page.getByTestId('approval-status').allTextContents())
        .toEqual(['approved', 'denied']);
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});
