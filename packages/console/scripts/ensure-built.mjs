// Builds the console when its build is missing or older than its sources (`pnpm start` runs
// this, so the README's two commands serve a console without a separate build step).
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const built = path.join(root, 'dist', 'index.html');

function newest(p) {
  const st = statSync(p);
  if (!st.isDirectory()) return st.mtimeMs;
  let max = st.mtimeMs;
  for (const name of readdirSync(p)) max = Math.max(max, newest(path.join(p, name)));
  return max;
}

const sources = ['src', 'public', 'index.html', 'vite.config.ts', '../sdk/src'].map((p) =>
  path.join(root, p),
);
const stale = !existsSync(built) || sources.some((p) => existsSync(p) && newest(p) > statSync(built).mtimeMs);
if (stale) {
  console.error('console: building packages/console (missing or older than its sources)');
  execFileSync('pnpm', ['exec', 'vite', 'build', '--logLevel', 'warn'], { cwd: root, stdio: 'inherit' });
}
