import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Vitest global setup of the examples project: `pnpm test` brings the browser `widget.test.ts`
 * drives (installing it when missing), or stops with the reason. The widget is only proven in a
 * real browser, so a missing one is a failure, never a skipped test.
 */
export default function setup() {
  const script = fileURLToPath(new URL('../../scripts/ensure-chromium.sh', import.meta.url));
  try {
    execFileSync('bash', [script], { stdio: 'inherit' });
  } catch {
    throw new Error(
      'examples/chat-widget needs Chromium, and scripts/ensure-chromium.sh could not provide it (reason above)',
    );
  }
}
