import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Vitest global setup of the console project: the browser the tests drive (installed by
 * scripts/ensure-chromium.sh when missing, as for examples/chat-widget) and the console's build
 * (made when missing or older than its sources). A missing browser fails the run.
 */
export default function setup() {
  const script = fileURLToPath(new URL('../../../scripts/ensure-chromium.sh', import.meta.url));
  try {
    execFileSync('bash', [script], { stdio: 'inherit' });
  } catch {
    throw new Error(
      'packages/console needs Chromium, and scripts/ensure-chromium.sh could not provide it (reason above)',
    );
  }
  execFileSync('node', [fileURLToPath(new URL('../scripts/ensure-built.mjs', import.meta.url))], {
    stdio: 'inherit',
  });
}
