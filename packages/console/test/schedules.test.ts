import {
  createTestSession,
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestSession,
} from '@ai-suite/server/test-harness';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectAccessible, launch, openConsole, screenshots, signIn } from './browser.js';

/**
 * The schedules section of an agent's page, in Chromium against the real server (fake model,
 * the schedule ticker polling every 100 ms).
 */
let ts: TestServer & { fake: FakeOpenAI };
let owner: TestSession;
let browser: Browser;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({
    fake: { defaultReply: { text: 'Summary written.' } },
    env: { SCHEDULE_POLL_INTERVAL_MS: '100', RUN_POLL_INTERVAL_MS: '50' },
  });
  const ws = await createTestWorkspace(ts, { name: 'Cron Co', creditsUsd: '5' });
  owner = await createTestSession(ts, ws, { role: 'owner', email: 'grace@example.com' });
  browser = await launch();
});

afterAll(async () => {
  await browser?.close();
  await ts?.close();
});

describe('agent schedules', () => {
  it('previews the next five times, creates, pauses, runs now and shows the history', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await signIn(page, owner.email, owner.password);
      await page.getByRole('link', { name: 'Agents' }).click();
      await page.getByLabel('Agent name').fill('Nightly');
      await page.getByLabel('Mode').selectOption('autonomous');
      await page.getByRole('button', { name: 'Create agent' }).click();
      await page.getByRole('heading', { name: 'Agent: Nightly' }).waitFor();
      const section = page.getByRole('region', { name: 'Schedules' });

      // A cron firing every second is refused with the server's reason, before creating.
      await section.getByLabel('Cron expression').fill('* * * * * *');
      await expect
        .poll(() => section.getByTestId('schedule-preview-error').textContent())
        .toBe('cron fires every 1 seconds; the minimum interval is 60 seconds');

      // Weekdays at 09:00 in Berlin: five times, each read in Berlin's time.
      await section.getByLabel('Cron expression').fill('0 9 * * 1-5');
      await section.getByLabel('Time zone').fill('Europe/Berlin');
      await expect.poll(() => section.getByTestId('schedule-preview-time').count()).toBe(5);
      const times = await section.getByTestId('schedule-preview-time').allTextContents();
      for (const t of times) {
        expect(t).toMatch(/^(Mon|Tue|Wed|Thu|Fri), .*09:00 (CET|CEST|GMT\+1|GMT\+2)$/);
      }
      await expect
        .poll(() => section.getByTestId('schedule-preview').textContent())
        .toContain('(at most once a day)');

      await section.getByLabel('Instructions for each run').fill('Summarise the night');
      await section.getByRole('button', { name: 'Create schedule' }).click();
      const item = section.getByTestId('schedule');
      await expect.poll(() => item.count()).toBe(1);
      await expect.poll(() => item.getByTestId('schedule-state').textContent()).toBe('active');
      await expect.poll(() => item.textContent()).toContain('Summarise the night');

      await item.getByRole('button', { name: 'Pause' }).click();
      await expect.poll(() => item.getByTestId('schedule-state').textContent()).toBe('paused');

      await item.getByRole('button', { name: 'Run now' }).click();
      await expect.poll(() => item.getByRole('status').textContent()).toMatch(/^Started run /);
      await item.getByRole('button', { name: 'History' }).click();
      await expect
        .poll(() => item.getByTestId('schedule-tick').allTextContents())
        .toEqual([expect.stringMatching(/^started run now · .* · run [0-9a-f]{8}$/)]);

      // Resumed, its tick is made due (as if the time had come): the ticker fires it.
      await item.getByRole('button', { name: 'Resume' }).click();
      await expect.poll(() => item.getByTestId('schedule-state').textContent()).toBe('active');
      await ts.server.deps
        .em()
        .execute(
          `update agent_schedules set next_run_at = '2025-01-06T08:00:00Z' where task = 'Summarise the night'`,
        );
      await expect
        .poll(
          async () =>
            (
              await ts.server.deps
                .em()
                .execute(`select 1 from schedule_ticks where tick_at = '2025-01-06T08:00:00Z'`)
            ).length,
          { timeout: 30_000 },
        )
        .toBe(1);
      // Closing and opening the history reads it again.
      await item.getByRole('button', { name: 'History' }).click();
      await item.getByRole('button', { name: 'History' }).click();
      await expect.poll(() => item.getByTestId('schedule-tick').count()).toBe(2);
      expect(await item.getByTestId('schedule-tick').first().textContent()).toMatch(
        /^started tick · 2025-01-06 08:00 · run [0-9a-f]{8}$/,
      );
      // Both runs are in the agent's runs.
      await page.reload();
      await page.getByRole('heading', { name: 'Agent: Nightly' }).waitFor();
      const runs = page.getByRole('region', { name: 'Autonomous runs' });
      await expect.poll(() => runs.getByRole('button', { name: 'Summarise the night' }).count()).toBe(2);

      await expectAccessible(page, 'agent schedules');
      await screenshots(page, 'agent-schedules');
      await section.getByTestId('schedule').getByRole('button', { name: 'Delete schedule' }).click();
      await expect.poll(() => section.getByTestId('schedule').count()).toBe(0);
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});
