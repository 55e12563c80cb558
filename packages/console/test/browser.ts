import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { expect } from 'vitest';

// The console project's global setup has made sure it runs.
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
/** Where screenshots go: CONSOLE_SCREENSHOTS_DIR, else test/screenshots (not committed). */
export const SCREENSHOTS =
  process.env.CONSOLE_SCREENSHOTS_DIR ?? fileURLToPath(new URL('./screenshots', import.meta.url));

export function launch(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
}

export interface ConsolePage {
  context: BrowserContext;
  page: Page;
  /** Console errors, failed scripts and CSP violations seen so far. */
  problems: string[];
}

/** A fresh browser context (its own cookies) on the console, recording what goes wrong. */
export async function openConsole(
  browser: Browser,
  baseURL: string,
  viewport = { width: 1280, height: 800 },
): Promise<ConsolePage> {
  const context = await browser.newContext({ baseURL, viewport });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('console', (m) => {
    // 4xx answers the page expects (a wrong password) are logged by the browser as errors.
    if (m.type() === 'error' && !/status of 4\d\d/.test(m.text())) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(e.message));
  return { context, page, problems };
}

/**
 * axe-core on the page as it is (WCAG 2.1 A/AA rules). Evaluated over the DevTools protocol,
 * which the page's CSP does not govern, so the console's CSP stays as served.
 */
export async function expectAccessible(page: Page, what: string): Promise<void> {
  await page.evaluate(AXE_SOURCE);
  const violations = await page.evaluate(async () => {
    const axe = (window as unknown as { axe: { run(ctx: unknown, opts: unknown): Promise<any> } }).axe;
    const result = await axe.run(document, {
      runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] },
    });
    return (result.violations as { id: string; help: string; nodes: { target: string[] }[] }[]).map(
      (v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`,
    );
  });
  expect(violations, `axe on ${what}`).toEqual([]);
}

/** Screenshots of the page at 1280×800 and 390 px wide (full height), named `<name>-desktop|phone.png`. */
export async function screenshots(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  const size = page.viewportSize() ?? { width: 1280, height: 800 };
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}-desktop.png`) });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}-phone.png`), fullPage: true });
  await page.setViewportSize(size);
}

export async function signIn(page: Page, email: string, password: string): Promise<void> {
  await page.goto('/');
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  // Attached, not visible: on a phone the navigation stays folded in the menu.
  await page.locator('#console-nav').waitFor({ state: 'attached' });
}
