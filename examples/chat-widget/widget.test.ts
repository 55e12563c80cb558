import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '@ai-suite/server/test-harness';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChatWidgetServer, startChatWidgetServer } from './serve.js';

// The examples project's global setup (browser-setup.ts) has made sure it runs.
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let appId: string;
let widget: ChatWidgetServer;
let browser: Browser;

const json = async <T = any>(res: Response): Promise<T> => (await res.json()) as T;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts, { creditsUsd: '5' });
  const res = await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'Shop helper' } });
  appId = (await json(res)).app.id;
  widget = await startChatWidgetServer({ apiBaseURL: ts.url, apiKey: ws.apiKey, appId });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
});

afterAll(async () => {
  await browser?.close();
  await widget?.close();
  await ts?.close();
});

describe('examples/chat-widget in headless Chromium', () => {
  it('chats through a widget token, cross-origin, streaming into the page and continuing the thread', async () => {
    ts.fake.script({ text: 'Hello from your shop assistant!', chunkSize: 6 }, { text: 'Still here.' });
    const page = await browser.newPage();
    const apiRequests: { url: string; method: string; auth: string | undefined }[] = [];
    page.on('request', (r) => {
      if (r.url().startsWith(ts.url))
        apiRequests.push({ url: r.url(), method: r.method(), auth: r.headers().authorization });
    });
    try {
      await page.goto(widget.url);
      await page.waitForSelector('#widget[data-state="ready"]');

      await page.fill('#message', 'Hi, do you ship abroad?');
      await page.click('#send');
      await page.waitForSelector('#widget[data-state="ready"] .assistant');
      await page.waitForFunction(
        () => document.querySelector('#widget')?.getAttribute('data-state') === 'ready',
      );
      expect(await page.textContent('.assistant')).toBe('Hello from your shop assistant!');
      const threadId = await page.getAttribute('#widget', 'data-thread-id');
      expect(threadId).toMatch(/^[0-9a-f-]{36}$/);

      await page.fill('#message', 'Thanks');
      await page.click('#send');
      await page.waitForFunction(() => document.querySelectorAll('.assistant').length === 2);
      await page.waitForFunction(
        () => document.querySelector('#widget')?.getAttribute('data-state') === 'ready',
      );
      expect(await page.locator('.assistant').nth(1).textContent()).toBe('Still here.');

      // Both turns landed in one thread, with the visitor id for insights.
      const thread = await json(
        await ts.api(`/apps/${appId}/memory/threads/${threadId}`, { key: ws.apiKey }),
      );
      expect(thread.data.message_count).toBe(4);
      expect(thread.data.metadata.anonymous_visitor_id).toMatch(/^[0-9a-f-]{36}$/);

      // The browser used a widget token from its own origin, never the API key.
      const chats = apiRequests.filter((r) => r.method === 'POST' && r.url.endsWith('/chat/message/stream'));
      expect(chats).toHaveLength(2);
      for (const r of chats) expect(r.auth).toMatch(/^Bearer svc_wt_/);
      expect(JSON.stringify(apiRequests)).not.toContain(ws.apiKey);
      // ...and that token only accepts the widget's origin, which the browser sent.
      const tokens = await json(await ts.api('/widget-tokens', { key: ws.apiKey }));
      const used = tokens.data.filter((t: { requestCount: number }) => t.requestCount > 0);
      expect(used).toHaveLength(1);
      expect(used[0]).toMatchObject({ appId, allowedOrigins: [widget.url], requestCount: 2 });
    } finally {
      await page.close();
    }
  });

  it('shows the stream error when the model fails mid-reply', async () => {
    ts.fake.script({ text: 'This will not finish at all', chunkSize: 5, failAfterChunks: 1 });
    const page = await browser.newPage();
    try {
      await page.goto(widget.url);
      await page.waitForSelector('#widget[data-state="ready"]');
      await page.fill('#message', 'Break please');
      await page.click('#send');
      await page.waitForSelector('#widget[data-state="error"]');
      expect(await page.textContent('.assistant.error')).toMatch(/^Error \(MODEL_ERROR\)/);
      expect(await page.textContent('.user')).toBe('Break please');
    } finally {
      await page.close();
    }
  });
});
