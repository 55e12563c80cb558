import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Vitest global setup of the projects that use the SDK as built (`dist/`, as a user gets it):
 * the package test and the examples' README commands. Builds it when `src/` is newer, once,
 * under a lock: the projects start together, and a build while another reads `dist/` breaks it.
 */
const SDK_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const LOCK = path.join(SDK_DIR, '.build.lock');

function newest(dir: string): number {
  return Math.max(
    0,
    ...fs.readdirSync(dir, { withFileTypes: true }).map((e) => {
      const p = path.join(dir, e.name);
      return e.isDirectory() ? newest(p) : fs.statSync(p).mtimeMs;
    }),
  );
}

const stale = () => {
  const dist = path.join(SDK_DIR, 'dist/index.js');
  return !fs.existsSync(dist) || newest(path.join(SDK_DIR, 'src')) > fs.statSync(dist).mtimeMs;
};

export default async function ensureSdkBuilt(): Promise<void> {
  for (let waited = 0; ; waited += 200) {
    try {
      fs.closeSync(fs.openSync(LOCK, 'wx'));
      break;
    } catch {
      // A lock older than any build is left over from a killed run.
      if (waited > 300_000 || Date.now() - fs.statSync(LOCK).mtimeMs > 300_000)
        fs.rmSync(LOCK, { force: true });
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  try {
    if (stale())
      execFileSync('pnpm', ['--filter', '@ai-suite/sdk', 'build'], { cwd: SDK_DIR, stdio: 'ignore' });
  } finally {
    fs.rmSync(LOCK, { force: true });
  }
}
