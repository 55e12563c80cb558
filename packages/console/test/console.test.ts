import { readFile } from 'node:fs/promises';
import {
  createTestSession,
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestSession,
  type TestWorkspace,
} from '@ai-suite/server/test-harness';
import {
  type FakeOidc,
  type FakeReplicate,
  fakeOidcEnv,
  startFakeOidc,
  startFakeReplicate,
} from '@ai-suite/testkit';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import yazl from 'yazl';
import { expectAccessible, launch, openConsole, screenshots, signIn } from './browser.js';

/**
 * The console end to end: the real server (embedded or DATABASE_URL database, fake model)
 * serving the built console, driven in Chromium. One server and one browser for the file.
 */
let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;
let owner: TestSession;
let browser: Browser;
let replicate: FakeReplicate;
let idp: FakeOidc;
const REPLICATE_TOKEN = 'r8_console_test_token';

beforeAll(async () => {
  // The image page's model is the fake Replicate of testkit.
  replicate = await startFakeReplicate({ token: REPLICATE_TOKEN });
  // The sign-in page's identity provider: testkit's fake OIDC, which vouches for Ada's email.
  idp = await startFakeOidc({
    users: [{ sub: 'ada-at-idp', email: 'ada@example.com', email_verified: true, name: 'Ada' }],
  });
  // The agent's web_fetch may reach this loopback server (its own /healthz).
  ts = await startTestServerWithFakeModel({
    env: {
      OUTBOUND_ALLOWLIST: '127.0.0.1',
      IMAGE_MODEL: 'acme/scan-gen',
      IMAGE_MODEL_ID: 'scan-gen',
      IMAGE_MODEL_PRICE_PER_IMAGE: '0.01',
      REPLICATE_BASE_URL: replicate.baseUrl,
      REPLICATE_API_TOKEN: REPLICATE_TOKEN,
      IMAGE_PREFER_WAIT_SECONDS: '1',
      IMAGE_POLL_INITIAL_MS: '5',
      IMAGE_POLL_MAX_MS: '20',
      ...fakeOidcEnv(idp),
      OIDC_PROVIDER_NAME: 'Example ID',
    },
  });
  ws = await createTestWorkspace(ts, { name: 'Acme', creditsUsd: '5', monthlyTokenQuota: 1_000_000 });
  owner = await createTestSession(ts, ws, { role: 'owner', email: 'ada@example.com' });
  browser = await launch();
});

afterAll(async () => {
  await browser?.close();
  await ts?.close();
  await replicate?.close();
  await idp?.close();
});

describe('serving the console', () => {
  it('serves index.html at / and any console path, with a CSP without inline script', async () => {
    for (const path of ['/', '/agents/some-id']) {
      const res = await fetch(`${ts.url}${path}`, { headers: { accept: 'text/html' } });
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
      expect(res.headers.get('cache-control')).toBe('no-cache');
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp).toMatch(/script-src 'self'(;|$)/);
      expect(csp).not.toMatch(/unsafe-inline|unsafe-eval|https?:/);
      expect(csp).toMatch(/frame-ancestors 'none'/);
      const html = await res.text();
      expect(html).toMatch(/<script type="module" crossorigin src="\/assets\/index-[\w-]+\.js"><\/script>/);
      // Nothing inline, nothing from another host.
      expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
      expect(html).not.toMatch(/(src|href)="(https?:)?\/\//);
    }
  });

  it('caches hashed assets for a year; a missing asset or API version is a 404, not the app', async () => {
    const html = await (await fetch(ts.url, { headers: { accept: 'text/html' } })).text();
    const asset = /src="(\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    const res = await fetch(`${ts.url}${asset}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(res.headers.get('content-type')).toMatch(/javascript/);
    for (const path of ['/assets/index-missing.js', '/api/v2/chat', '/console-api/v2/chat', '/nothing.png']) {
      const r = await fetch(`${ts.url}${path}`);
      expect(r.status, path).toBe(404);
      expect(await r.json()).toEqual({ error: 'Not found', code: 'NOT_FOUND' });
    }
  });
});

describe('the fallback', () => {
  it('gives a browser navigating to an unknown path the console, and a scraper the JSON 404', async () => {
    const { page, problems } = await openConsole(browser, ts.url);
    try {
      const nav = await page.goto('/metrics');
      expect(nav?.status()).toBe(200);
      expect(nav?.headers()['content-type']).toMatch(/^text\/html/);
      await page.getByRole('heading', { name: 'Sign in to AI Suite' }).waitFor();
      // The same path fetched by a client that does not ask for HTML (as Prometheus does).
      const scraped = await page.request.get('/metrics', {
        headers: { accept: 'text/plain;version=0.0.4;q=0.9,*/*;q=0.1' },
      });
      expect(scraped.status()).toBe(404);
      expect(await scraped.json()).toEqual({ error: 'Not found', code: 'NOT_FOUND' });
      expect(problems).toEqual([]);
    } finally {
      await page.context().close();
    }
  });
});

describe('signing in', () => {
  it('refuses a wrong password, signs in, shows the workspace, signs out', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await page.goto('/');
      await page.getByRole('heading', { name: 'Sign in to AI Suite' }).waitFor();
      await expectAccessible(page, 'sign-in');
      await screenshots(page, 'sign-in');
      await page.getByLabel('Email').fill(owner.email);
      await page.getByLabel('Password').fill('wrong password');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await expect.poll(() => page.getByRole('alert').textContent()).toBe('Invalid email or password');

      await signIn(page, owner.email, owner.password);
      await expect.poll(() => page.getByTestId('workspace-name').textContent()).toBe('Acme');
      await expect.poll(() => page.getByTestId('role').textContent()).toBe('owner');
      const cookies = await context.cookies();
      expect(cookies.find((c) => c.name === 'aisuite_session')?.httpOnly).toBe(true);
      await expectAccessible(page, 'overview');

      // Keyboard: the skip link comes first and lands on the content.
      await page.keyboard.press('Tab');
      expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Skip to content');

      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByRole('heading', { name: 'Sign in to AI Suite' }).waitFor();
      expect((await context.cookies()).find((c) => c.name === 'aisuite_session')).toBeUndefined();
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

describe('signing in with the identity provider', () => {
  it('offers "Sign in with Example ID", which goes through the provider and back signed in', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await page.goto('/');
      const button = page.getByRole('link', { name: 'Sign in with Example ID' });
      await button.waitFor();
      expect(await button.getAttribute('href')).toBe('/api/v1/auth/oidc/start?returnTo=%2F');
      await expectAccessible(page, 'sign-in with OIDC');
      await button.click();
      // The provider (no page of its own) sends the browser back through the callback to the console.
      await page.getByRole('navigation', { name: 'Console' }).waitFor();
      await expect.poll(() => page.getByTestId('workspace-name').textContent()).toBe('Acme');
      await expect.poll(() => page.getByTestId('role').textContent()).toBe('owner');
      expect(idp.authorizeRequests.at(-1)?.params.get('code_challenge_method')).toBe('S256');
      expect((await context.cookies()).find((c) => c.name === 'aisuite_session')?.httpOnly).toBe(true);
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

describe('a failed sign-in with the identity provider', () => {
  it('ends on a console page that says why and offers the ways back, not on JSON', async () => {
    // Someone the provider knows but nobody invited; sign-up is off.
    idp.addUser({ sub: 'stranger-at-idp', email: 'stranger@example.com', email_verified: true });
    idp.setDefaultUser('stranger-at-idp');
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await page.goto('/');
      await page.getByRole('link', { name: 'Sign in with Example ID' }).click();
      await page.getByRole('heading', { name: 'Sign-in did not work' }).waitFor();
      expect(new URL(page.url()).pathname).toBe('/sign-in/problem');
      await expect.poll(() => page.locator('main').textContent()).toMatch(/no account here uses your email/);
      expect(await page.locator('main').textContent()).toMatch(/ask an owner or admin .* to invite/);
      await expectAccessible(page, 'sign-in problem');
      await screenshots(page, 'sign-in-problem');
      expect((await context.cookies()).find((c) => c.name === 'aisuite_session')).toBeUndefined();
      // The way back: the password form.
      await page.getByRole('link', { name: 'Sign in with a password' }).click();
      await page.getByRole('heading', { name: 'Sign in to AI Suite' }).waitFor();
      // The provider refusing: the page offers another try.
      idp.misbehave({ denyAuthorization: true });
      await page.getByRole('link', { name: 'Sign in with Example ID' }).click();
      await page.getByRole('heading', { name: 'Sign-in did not work' }).waitFor();
      await page.getByRole('link', { name: 'Try Example ID again' }).waitFor();
      expect(page.url()).toMatch(/code=OIDC_PROVIDER_REFUSED$/);
      expect(problems).toEqual([]);
    } finally {
      idp.misbehave({});
      idp.setDefaultUser('ada-at-idp');
      await context.close();
    }
  });
});

describe('an owner at work', () => {
  it('sees the overview, creates a key shown once, streams a playground reply with its cost', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await signIn(page, owner.email, owner.password);
      await expect.poll(() => page.getByTestId('balance').textContent()).toBe('$5.0000');
      await expect.poll(() => page.getByTestId('quota').textContent()).toMatch(/^\d[\d,]* \/ 1,000,000$/);
      await expectAccessible(page, 'overview');

      // API keys: the new key is shown once, with a copy button; the list shows only its prefix.
      await page.getByRole('link', { name: 'API keys' }).click();
      await page.getByRole('heading', { name: 'API keys', level: 1 }).waitFor();
      await page.getByLabel('Name of the new key').fill('backend');
      await page.getByRole('button', { name: 'Create key' }).click();
      const key = (await page.getByTestId('new-key-value').textContent()) ?? '';
      expect(key).toMatch(/^svc_ai_[A-Za-z0-9]{64}$/);
      await expect.poll(() => page.getByRole('button', { name: 'Copy key' }).isVisible()).toBe(true);
      const row = page.getByTestId('key-row').filter({ hasText: 'backend' });
      await expect.poll(() => row.locator('code').textContent()).toBe(`${key.slice(0, 11)}…`);
      await expectAccessible(page, 'API keys');
      await screenshots(page, 'api-keys');
      // The page shows the OpenAI-compatible base URL to copy; the new key works there.
      const baseUrl = await page.getByTestId('openai-base-url-value').textContent();
      expect(baseUrl).toBe(`${ts.url}/api/v1/openai`);
      await expect.poll(() => page.getByRole('button', { name: 'Copy base URL' }).isVisible()).toBe(true);
      const models = await fetch(`${baseUrl}/models`, { headers: { authorization: `Bearer ${key}` } });
      expect(models.status).toBe(200);
      expect(((await models.json()) as { object: string }).object).toBe('list');
      // The key works on /api/v1, and is never shown again.
      expect((await ts.api('/me', { key })).status).toBe(200);
      await page.reload();
      await page.getByTestId('key-row').first().waitFor();
      expect(await page.content()).not.toContain(key);

      // Playground: a streamed reply, then its tokens and cost.
      ts.fake.script({
        text: 'Hello from the playground!',
        chunkSize: 5,
        usage: { prompt_tokens: 12, completion_tokens: 6 },
      });
      await page.getByRole('link', { name: 'Playground' }).click();
      await page.getByLabel('Model').selectOption('fake-chat');
      await page.getByLabel('Message').fill('Say hello');
      await page.getByLabel('Message').press('Enter');
      await expect
        .poll(() => page.getByTestId('turn-assistant').locator('.text').textContent())
        .toBe('Hello from the playground!');
      await expect
        .poll(() => page.getByTestId('reply-usage').textContent())
        .toBe('12 in · 6 out · $0.000024 · fake-chat');
      expect(ts.fake.requests.at(-1)?.body).toMatchObject({ model: 'fake-chat' });
      await expectAccessible(page, 'playground');
      await screenshots(page, 'playground');

      // The overview counts the reply, under "console (no key)".
      await page.getByRole('link', { name: 'Overview' }).click();
      await expect.poll(() => page.getByTestId('total-requests').textContent()).toBe('1');
      await expect
        .poll(() => page.getByRole('table', { name: 'Usage by API key' }).textContent())
        .toContain('console (no key)');
      await screenshots(page, 'overview');
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

describe('agents', () => {
  it('creates an agent, changes its config with the merge shown, runs a turn in which the model calls a tool', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await signIn(page, owner.email, owner.password);
      await page.getByRole('link', { name: 'Agents' }).click();
      await page.getByLabel('Agent name').fill('Fetcher');
      await page.getByRole('button', { name: 'Create agent' }).click();
      await page.getByRole('heading', { name: 'Agent: Fetcher' }).waitFor();
      await expect
        .poll(() => page.getByTestId('config-defaults').textContent())
        .toContain('"web_fetch": false');
      await expect
        .poll(() => page.getByTestId('config-overrides').textContent())
        .toBe('Differs from the defaults at: nothing');

      await page.getByLabel('Config change (JSON)').fill('{"capabilities": {"tools": {"web_fetch": true}}}');
      await expect
        .poll(() => page.getByTestId('config-changes').textContent())
        .toBe('This changes: capabilities.tools.web_fetch');
      await page.getByRole('button', { name: 'Save config' }).click();
      await expect
        .poll(() => page.getByTestId('config-overrides').textContent())
        .toBe('Differs from the defaults at: capabilities.tools.web_fetch');
      await expectAccessible(page, 'agent detail');
      await screenshots(page, 'agent');

      await page.getByRole('button', { name: 'New session' }).click();
      await page.getByRole('heading', { name: 'Agent session' }).waitFor();
      ts.fake.script(
        {
          toolCalls: [
            { id: 'call_1', name: 'web_fetch', arguments: JSON.stringify({ url: `${ts.url}/healthz` }) },
          ],
        },
        { text: 'The service says it is ok.' },
      );
      await page.getByLabel('Message to the agent').fill('Is the service up?');
      await page.getByRole('button', { name: 'Send' }).click();
      await page
        .getByTestId('timeline-assistant')
        .filter({ hasText: 'The service says it is ok.' })
        .waitFor();
      // The tool call shows its name, the arguments the model gave and the result.
      const tool = page.getByTestId('timeline-tool');
      await expect.poll(() => tool.getByTestId('tool-name').textContent()).toBe('web_fetch');
      await expect
        .poll(async () => JSON.parse((await tool.getByTestId('tool-arguments').textContent()) ?? 'null'))
        .toEqual({ url: `${ts.url}/healthz` });
      await expect.poll(() => tool.getByTestId('tool-result').textContent()).toContain('ok');
      await expect.poll(() => page.getByTestId('timeline-run').first().textContent()).toContain('completed');
      await expectAccessible(page, 'agent session');
      await screenshots(page, 'agent-session');
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

const PNG_1X1 = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==',
  'base64',
);

describe('storage and insights', () => {
  it('uploads a text file and an image and previews both; opens a conversation in insights', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await signIn(page, owner.email, owner.password);
      await page.getByRole('link', { name: 'Storage' }).click();
      await page.getByLabel('New folder').fill('docs');
      await page.getByRole('button', { name: 'Create folder' }).click();
      await page.getByRole('link', { name: '📁 docs' }).click();
      await expect.poll(() => page.url()).toContain('path=%2Fdocs');
      await page.getByLabel('Upload files here').setInputFiles([
        {
          name: 'notes.md',
          mimeType: 'text/markdown',
          buffer: Buffer.from('# Notes\nThe console uploads files.\n'),
        },
        { name: 'dot.png', mimeType: 'image/png', buffer: PNG_1X1 },
      ]);
      await page.getByText('Uploaded 2 file(s).').waitFor();
      await page.getByRole('button', { name: 'notes.md' }).click();
      await expect
        .poll(() => page.getByTestId('preview-text').textContent())
        .toBe('# Notes\nThe console uploads files.\n');
      await expect.poll(() => page.getByTestId('index-status').textContent()).toBe('none');
      await page.getByRole('button', { name: 'dot.png' }).click();
      const img = page.getByTestId('preview-image');
      await img.waitFor();
      expect(await img.evaluate((el) => (el as HTMLImageElement).naturalWidth)).toBe(1);
      expect(await img.getAttribute('src')).toMatch(/^blob:/);
      await expectAccessible(page, 'storage');
      await screenshots(page, 'storage');

      // A conversation made through an app with the API key, read in insights.
      const app = await ts.api('/apps', { method: 'POST', key: ws.apiKey, json: { name: 'Help desk' } });
      const appId = ((await app.json()) as { app: { id: string } }).app.id;
      ts.fake.script({ text: 'Our opening hours are 9 to 5.' });
      const sent = await ts.api(`/apps/${appId}/chat/message`, {
        method: 'POST',
        key: ws.apiKey,
        json: { message: 'When are you open?', role: 'customer' },
      });
      expect(sent.status).toBe(200);
      await page.getByRole('link', { name: 'Insights' }).click();
      await page.getByRole('cell', { name: 'Help desk' }).waitFor();
      await page.getByRole('table', { name: 'Conversations' }).getByRole('link').first().click();
      await page
        .getByTestId('message-assistant')
        .filter({ hasText: 'Our opening hours are 9 to 5.' })
        .waitFor();
      await expect
        .poll(() => page.getByTestId('message-user').first().textContent())
        .toContain('When are you open?');
      await expectAccessible(page, 'insights conversation');
      await screenshots(page, 'insights');
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

describe('members', () => {
  it('invites a member, who joins through the link and sees the restricted view', async () => {
    const owners = await openConsole(browser, ts.url);
    let url: string;
    try {
      await signIn(owners.page, owner.email, owner.password);
      await owners.page.getByRole('link', { name: 'Members' }).click();
      await owners.page.getByLabel('Email to invite').fill('grace@example.com');
      await owners.page.getByRole('button', { name: 'Invite' }).click();
      url = (await owners.page.getByTestId('invite-url').textContent()) ?? '';
      expect(url).toMatch(/\/invitations\/accept#token=svc_iv_/);
      await expectAccessible(owners.page, 'members');
      await screenshots(owners.page, 'members');
      expect(owners.problems).toEqual([]);
    } finally {
      await owners.context.close();
    }

    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await page.goto(url.replace(/^https?:\/\/[^/]+/, ''));
      await page.getByText('grace@example.com is invited to Acme as member.').waitFor();
      await expectAccessible(page, 'accept invitation');
      await page.getByLabel('Your name').fill('Grace');
      await page.getByLabel('Choose a password').fill('a long enough password');
      await page.getByRole('button', { name: 'Join Acme' }).click();
      await page.getByRole('navigation', { name: 'Console' }).waitFor();
      await expect.poll(() => page.getByTestId('role').textContent()).toBe('member');
      // Members do not manage keys: the page says why.
      const nav = page.getByRole('navigation', { name: 'Console' });
      await expect.poll(() => nav.getByRole('link', { name: 'API keys' }).count()).toBe(1);
      await nav.getByRole('link', { name: 'API keys' }).click();
      await page.getByTestId('restricted').waitFor();
      // The base URL is for everyone: a member uses a key an owner gave them.
      await page.getByTestId('openai-base-url').waitFor();
      await nav.getByRole('link', { name: 'Members' }).click();
      await page.getByTestId('restricted').waitFor();
      await expect.poll(() => page.getByTestId('member-row').count()).toBe(2);
      await expect.poll(() => page.getByRole('button', { name: /Remove/ }).count()).toBe(0);
      await expect.poll(() => page.getByRole('button', { name: 'Invite' }).count()).toBe(0);
      await expectAccessible(page, 'members (member)');
      await screenshots(page, 'members-restricted');
      // The server refuses what the page does not offer.
      const cookie = (await context.cookies()).find((c) => c.name === 'aisuite_session');
      const refused = await fetch(`${ts.url}/console-api/v1/workspaces/${ws.workspaceId}/api-keys`, {
        headers: { cookie: `aisuite_session=${cookie?.value}` },
      });
      expect(refused.status).toBe(403);
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

describe('apps', () => {
  it('creates an app, reads its memory, issues a widget token with its embed snippet', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await signIn(page, owner.email, owner.password);
      await page.getByRole('link', { name: 'Apps' }).click();
      await page.getByLabel('App name').fill('Shop helper');
      await page.getByRole('button', { name: 'Create app' }).click();
      await page.getByRole('heading', { name: 'App: Shop helper' }).waitFor();
      const appId = page.url().split('/').at(-1) ?? '';
      ts.fake.script({ text: 'We ship worldwide.' });
      const sent = await ts.api(`/apps/${appId}/chat/message`, {
        method: 'POST',
        key: ws.apiKey,
        json: { message: 'Do you ship abroad?', role: 'visitor' },
      });
      expect(sent.status).toBe(200);
      await page.reload();
      await page.getByRole('heading', { name: 'Memory' }).waitFor();
      await page.getByRole('region', { name: 'Memory' }).getByRole('button').first().click();
      await page.getByText('We ship worldwide.').waitFor();

      await page.getByLabel('Allowed origins').fill('https://shop.example');
      await page.getByLabel('Request cap').fill('50');
      await page.getByRole('button', { name: 'Create widget token' }).click();
      const token = (await page.getByTestId('widget-token').textContent()) ?? '';
      expect(token).toMatch(/^svc_wt_/);
      await expect
        .poll(() => page.getByTestId('embed-snippet').textContent())
        .toContain(`widgetToken: '${token}'`);
      await expect.poll(() => page.getByText('https://shop.example · 0/50 requests').count()).toBe(1);
      await expectAccessible(page, 'app');
      await screenshots(page, 'app');
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

/** A PDF whose pages carry the given texts (pdf-lib), as a person would upload. */
async function buildPdf(pages: string[]): Promise<Buffer> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  for (const text of pages) doc.addPage([612, 792]).drawText(text, { x: 40, y: 750, size: 10, font });
  return Buffer.from(await doc.save());
}

describe('documents', () => {
  it('uploads a PDF and a note, deletes the note, asks a question and opens the cited page', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await signIn(page, owner.email, owner.password);
      await page.getByRole('link', { name: 'Documents' }).click();
      await page.getByRole('heading', { name: 'Documents', level: 1 }).waitFor();
      await page.getByText('No documents yet: upload some above.').waitFor();
      const pdf = await buildPdf([
        'Welcome. Fill the device with water before switching it on.',
        'The warranty of the blue kettle lasts seven years from the date of purchase.',
      ]);
      await page.getByLabel('Upload documents').setInputFiles([
        { name: 'manual.pdf', mimeType: 'application/pdf', buffer: pdf },
        {
          name: 'notes.md',
          mimeType: 'text/markdown',
          buffer: Buffer.from('# Notes\n\nThe cat is Pixel.\n'),
        },
      ]);
      await expect
        .poll(() => page.getByTestId('upload-notice').textContent())
        .toBe('Indexed 2 of 2 file(s).');
      const rows = page.getByTestId('document-row');
      await expect.poll(() => rows.count()).toBe(2);
      const manual = rows.filter({ hasText: 'manual.pdf' });
      await expect.poll(() => manual.getByTestId('document-status').textContent()).toBe('ready');
      // Chunks never span pages: one per page.
      await expect.poll(() => manual.getByTestId('document-chunks').textContent()).toBe('2');

      page.once('dialog', (d) => void d.accept());
      await page.getByRole('button', { name: 'Delete notes.md' }).click();
      await expect.poll(() => page.getByTestId('upload-notice').textContent()).toBe('Deleted notes.md.');
      await expect.poll(() => rows.count()).toBe(1);

      // The model cites the source that holds the answer, by its number in the prompt.
      ts.fake.script((body: { messages: { content: string }[] }) => {
        const prompt = body.messages.at(-1)?.content ?? '';
        const sources = [
          ...prompt.matchAll(/^\[(\d+)\] [^\n]*\n([\s\S]*?)(?=\n\n\[\d+\] |\n\nQuestion: )/gm),
        ];
        const hit = sources.find((m) => (m[2] ?? '').includes('seven years'));
        return { text: hit ? `The warranty lasts seven years [${hit[1]}].` : 'NOT_IN_DOCUMENTS' };
      });
      await page.getByLabel('Question').fill('How long is the warranty of the blue kettle?');
      await page.getByRole('button', { name: 'Ask' }).click();
      const answer = page.getByTestId('rag-answer');
      await expect.poll(() => answer.textContent()).toMatch(/^The warranty lasts seven years \[\d\]\.$/);
      const cite = answer.getByRole('link');
      await expect.poll(() => cite.count()).toBe(1);
      await cite.click();
      // The cited source is highlighted and focused: the document and the page.
      const source = page.locator('[data-testid="rag-source"][aria-current="true"]');
      await expect.poll(() => source.getByTestId('source-document').textContent()).toBe('manual.pdf');
      await expect.poll(() => source.getByTestId('source-page').textContent()).toBe('page 2');
      await expect.poll(() => source.textContent()).toContain('seven years from the date of purchase');
      await expect
        .poll(() => page.evaluate(() => document.activeElement?.getAttribute('data-testid')))
        .toBe('rag-source');
      // The source opens the stored PDF in a new tab at the cited page.
      const [tab, content] = await Promise.all([
        context.waitForEvent('page'),
        page.waitForResponse((r) => r.url().includes('/storage/content?')),
        source.getByRole('button', { name: 'Open page 2 of manual.pdf' }).click(),
      ]);
      await expect.poll(() => tab.url()).toMatch(/^blob:http:\/\/[^#]+#page=2$/);
      expect(content.status()).toBe(200);
      expect(content.headers()['content-type']).toBe('application/pdf');
      await tab.close();
      await expectAccessible(page, 'documents');
      await screenshots(page, 'documents');
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

describe('images', () => {
  it('generates an image from a prompt and shows it; keeps one in storage', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await signIn(page, owner.email, owner.password);
      await page.getByRole('link', { name: 'Images' }).click();
      await page.getByRole('heading', { name: 'Images', level: 1 }).waitFor();
      await expect.poll(() => page.getByLabel('Image model').locator('option').count()).toBe(2);
      await page.getByLabel('Image model').selectOption('scan-gen');
      await page.getByLabel('Prompt').fill('A lighthouse at dusk');
      await page.getByRole('button', { name: 'Generate' }).click();
      const shown = page.getByTestId('generated-image');
      await expect.poll(() => shown.count()).toBe(1);
      const img = shown.first().getByRole('img', { name: 'Generated from: A lighthouse at dusk' });
      await expect.poll(() => img.evaluate((el) => (el as HTMLImageElement).naturalWidth)).toBeGreaterThan(0);
      expect(await img.getAttribute('src')).toMatch(/^blob:/);
      await expect
        .poll(() => shown.first().getByTestId('image-meta').textContent())
        .toBe('scan-gen · replicate · $0.0100');
      const prediction = replicate.requests.find((r) => r.method === 'POST');
      expect(prediction?.body.input).toMatchObject({ prompt: 'A lighthouse at dusk' });

      // Kept in storage: shown from the stored file.
      await page.getByLabel('Keep in storage').check();
      await page.getByLabel('Prompt').fill('A harbour at dawn');
      await page.getByRole('button', { name: 'Generate' }).click();
      await expect.poll(() => shown.count()).toBe(2);
      const stored = shown.first();
      await expect.poll(() => stored.textContent()).toMatch(/Kept in storage as image-[\w-]+\.png/);
      const img2 = stored.getByRole('img', { name: 'Generated from: A harbour at dawn' });
      await expect
        .poll(() => img2.evaluate((el) => (el as HTMLImageElement).naturalWidth))
        .toBeGreaterThan(0);
      await expectAccessible(page, 'images');
      await screenshots(page, 'images');
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

/** A zip of the given files (yazl), as a person would import. */
function zipOf(files: Record<string, string>): Promise<Buffer> {
  const zip = new yazl.ZipFile();
  for (const [name, text] of Object.entries(files)) zip.addBuffer(Buffer.from(text), name);
  zip.end();
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    zip.outputStream.on('data', (c: Buffer) => parts.push(c));
    zip.outputStream.on('end', () => resolve(Buffer.concat(parts)));
    zip.outputStream.on('error', reject);
  });
}

describe('storage zip import', () => {
  it('imports a zip into a folder, keeping its folders, and previews a file from it', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await signIn(page, owner.email, owner.password);
      await page.getByRole('link', { name: 'Storage' }).click();
      await page.getByLabel('New folder').fill('imports');
      await page.getByRole('button', { name: 'Create folder' }).click();
      await page.getByRole('link', { name: '📁 imports' }).click();
      await expect.poll(() => page.url()).toContain('path=%2Fimports');
      const zip = await zipOf({
        'readme.md': '# Site\nImported from a zip.\n',
        'guide/intro.md': 'Start here.\n',
      });
      await page
        .getByLabel('Import a zip here')
        .setInputFiles({ name: 'site.zip', mimeType: 'application/zip', buffer: zip });
      await page.getByText('Imported 2 file(s) from site.zip.').waitFor();
      const listing = page.getByRole('list', { name: 'Contents of /imports' });
      await listing.getByRole('link', { name: '📁 guide' }).waitFor();
      await listing.getByRole('button', { name: 'readme.md' }).click();
      await expect
        .poll(() => page.getByTestId('preview-text').textContent())
        .toBe('# Site\nImported from a zip.\n');
      await listing.getByRole('link', { name: '📁 guide' }).click();
      await page
        .getByRole('list', { name: 'Contents of /imports/guide' })
        .getByRole('button', { name: 'intro.md' })
        .click();
      await expect.poll(() => page.getByTestId('preview-text').textContent()).toBe('Start here.\n');
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

describe('autonomous runs', () => {
  it('starts a run that writes a deliverable, shows its events and downloads the artifact', async () => {
    const { page, context, problems } = await openConsole(browser, ts.url);
    try {
      await signIn(page, owner.email, owner.password);
      await page.getByRole('link', { name: 'Agents' }).click();
      await page.getByLabel('Agent name').fill('Reporter');
      await page.getByLabel('Mode').selectOption('autonomous');
      await page.getByRole('button', { name: 'Create agent' }).click();
      await page.getByRole('heading', { name: 'Agent: Reporter' }).waitFor();
      const report = '# Status\n\nAll systems nominal.\n';
      ts.fake.script(
        {
          toolCalls: [
            {
              id: 'd1',
              name: 'deliverable_write',
              arguments: JSON.stringify({ filename: 'status.md', content: report }),
            },
          ],
        },
        { text: 'The report is written.' },
      );
      await page.getByLabel('Task').fill('Write a status report');
      await page.getByRole('button', { name: 'Start run' }).click();
      // The started run opens; it refreshes itself until it ends.
      await expect
        .poll(() => page.getByTestId('run-status').textContent(), { timeout: 40_000 })
        .toBe('completed');
      await expect
        .poll(() => page.getByTestId('run-event').locator('code').allTextContents())
        .toEqual(
          expect.arrayContaining(['run.started', 'tool_call.started', 'artifact.created', 'run.completed']),
        );
      await expect
        .poll(() => page.getByTestId('run-artifact').textContent())
        .toContain(`text/markdown, ${Buffer.byteLength(report)} bytes`);
      const download = page.waitForEvent('download');
      await page.getByRole('button', { name: 'Download status.md' }).click();
      const file = await download;
      expect(file.suggestedFilename()).toBe('status.md');
      expect(await readFile(await file.path(), 'utf8')).toBe(report);
      await expectAccessible(page, 'agent runs');
      await screenshots(page, 'agent-run');
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

describe('on a phone', () => {
  it('every page fits 390 px (and 360) without sideways scrolling, every section is in the menu, axe stays clean', async () => {
    // Data that makes the pages wide: long names, an agent with a session, an app with a thread
    // (a conversation for insights), a stored file, a document, keys, an invitation.
    const api = (path: string, init: Parameters<typeof ts.api>[1] = {}) =>
      ts.api(path, { key: ws.apiKey, ...init });
    const long = 'quarterly-revenue-reconciliation-for-the-northern-region';
    const agent = (await (
      await api('/managed-agents/agents', { method: 'POST', json: { name: `Agent ${long}` } })
    ).json()) as { agent: { id: string } };
    const session = (await (
      await api(`/managed-agents/agents/${agent.agent.id}/sessions`, { method: 'POST', json: {} })
    ).json()) as { session: { id: string } };
    const app = (await (await api('/apps', { method: 'POST', json: { name: `App ${long}` } })).json()) as {
      app: { id: string };
    };
    ts.fake.script({ text: 'A reply.' });
    const chat = (await (
      await api(`/apps/${app.app.id}/chat/message`, {
        method: 'POST',
        json: { message: 'Hello', role: 'student' },
      })
    ).json()) as { threadId: string };
    const fd = new FormData();
    fd.append('pathPrefix', `/${long}`);
    fd.append('file[]', new Blob(['x']), `${long}-${long}.txt`);
    expect(
      (await api(`/workspaces/${ws.workspaceId}/storage/import`, { method: 'POST', body: fd })).status,
    ).toBe(201);
    const colleague = await createTestSession(ts, ws, {
      role: 'member',
      email: `colleague-${long}@example.com`,
    });
    await ts.api(`/workspaces/${ws.workspaceId}/invitations`, {
      method: 'POST',
      key: owner.token,
      json: { email: `${long}@example.com`, role: 'member' },
    });

    const { page, context, problems } = await openConsole(browser, ts.url, { width: 390, height: 844 });
    const fits = async (what: string) => {
      const w = await page.evaluate(() => ({
        doc: document.documentElement.scrollWidth,
        viewport: window.innerWidth,
      }));
      expect(w.doc, `${what}: document ${w.doc} px wide`).toBeLessThanOrEqual(w.viewport);
    };
    try {
      // The pages before signing in.
      for (const [path, heading] of [
        ['/', 'Sign in to AI Suite'],
        ['/sign-in/problem?code=SIGNUP_DISABLED', 'Sign-in did not work'],
        ['/invitations/accept#token=svc_inv_unknown', 'Join a workspace'],
      ] as const) {
        await page.goto(path);
        await page.getByRole('heading', { name: heading }).waitFor();
        await page.waitForLoadState('networkidle');
        await fits(path);
        await expectAccessible(page, `${path} on a phone`);
      }
      await signIn(page, owner.email, owner.password);
      const pages: [string, string][] = [
        ['/', 'Overview'],
        ['/playground', 'Playground'],
        ['/images', 'Images'],
        ['/agents', 'Agents'],
        [`/agents/${agent.agent.id}`, `Agent ${long}`],
        [`/agents/${agent.agent.id}/sessions/${session.session.id}`, ''],
        ['/apps', 'Apps'],
        [`/apps/${app.app.id}`, `App: App ${long}`],
        ['/storage', 'Storage'],
        [`/storage?path=${encodeURIComponent(`/${long}`)}`, 'Storage'],
        ['/documents', 'Documents'],
        ['/insights', 'Insights'],
        [`/insights?thread=${chat.threadId}`, ''],
        ['/api-keys', 'API keys'],
        ['/members', 'Members'],
      ];
      // The widths, and what sticks out past the right edge (scrolled or not), to help name a culprit.
      const overflow = () =>
        page.evaluate(() => {
          const culprits = [...document.body.querySelectorAll('*')]
            .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 0.5)
            .slice(0, 5)
            .map(
              (el) =>
                `${el.tagName.toLowerCase()}.${el.className} (${Math.round(el.getBoundingClientRect().right)} px)`,
            );
          return {
            doc: document.documentElement.scrollWidth,
            body: document.body.scrollWidth,
            viewport: window.innerWidth,
            culprits: culprits.join(', '),
          };
        });
      for (const width of [390, 360]) {
        await page.setViewportSize({ width, height: 844 });
        for (const [path, heading] of pages) {
          await page.goto(path);
          const h1 = page.getByRole('heading', { level: 1 });
          await h1.waitFor();
          if (heading) await expect.poll(() => h1.textContent(), { timeout: 20_000 }).toContain(heading);
          await page.waitForLoadState('networkidle');
          const w = await overflow();
          expect(
            w.doc,
            `${path} at ${width} px: document ${w.doc} px wide: ${w.culprits}`,
          ).toBeLessThanOrEqual(w.viewport);
          expect(w.body, `${path} at ${width} px: body ${w.body} px wide`).toBeLessThanOrEqual(w.viewport);
          if (width === 390) await expectAccessible(page, `${path} on a phone`);
        }
      }
      await page.setViewportSize({ width: 390, height: 844 });
      await page.goto('/');
      await page.getByRole('heading', { level: 1 }).waitFor();
      await screenshots(page, 'overview-phone-menu-closed');
      // The menu: closed, a button says so; open, it lists every section, each one a tap away.
      const menu = page.getByRole('button', { name: 'Menu' });
      expect(await menu.getAttribute('aria-expanded')).toBe('false');
      await menu.click();
      expect(await menu.getAttribute('aria-expanded')).toBe('true');
      const nav = page.getByRole('navigation', { name: 'Console' });
      const sections = [
        'Overview',
        'Playground',
        'Images',
        'Agents',
        'Apps',
        'Storage',
        'Documents',
        'Insights',
        'API keys',
        'Members',
      ];
      for (const name of sections) {
        const link = nav.getByRole('link', { name, exact: true });
        expect(await link.isVisible(), name).toBe(true);
        const box = await link.boundingBox();
        expect(box && box.x >= 0 && box.x + box.width <= 390, `${name} within the screen`).toBe(true);
      }
      await expectAccessible(page, 'the menu open on a phone');
      await screenshots(page, 'menu-phone');
      await nav.getByRole('link', { name: 'Members', exact: true }).click();
      await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('Members');
      // Choosing a section closes the menu.
      expect(await page.getByRole('button', { name: 'Menu' }).getAttribute('aria-expanded')).toBe('false');
      // The Members table scrolls inside its box; its actions are reachable there.
      const table = page.locator('section.table-wrap[aria-label="Members"]');
      await table.waitFor();
      const wide = await table.evaluate((el) => ({ scroll: el.scrollWidth, client: el.clientWidth }));
      if (wide.scroll > wide.client) {
        await table.evaluate((el) => {
          el.scrollLeft = el.scrollWidth;
        });
      }
      const action = table.getByRole('combobox', { name: `Role of ${colleague.email}` });
      await action.scrollIntoViewIfNeeded();
      const b = await action.boundingBox();
      expect(b && b.x >= 0 && b.x + b.width <= 390, 'the role select is on screen').toBe(true);
      const revoke = page.getByRole('button', { name: `Revoke the invitation of ${long}@example.com` });
      await revoke.scrollIntoViewIfNeeded();
      const r = await revoke.boundingBox();
      expect(r && r.x >= 0 && r.x + r.width <= 390, 'the revoke button is on screen').toBe(true);
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});
