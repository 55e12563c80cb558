#!/usr/bin/env node
// No server source file over MAX_LINES lines (tests, test support, migrations and generated
// files aside), so every room stays readable. Run by `pnpm lint`. ALLOWED lists the files still
// larger, each to be split; an entry that no longer needs to be there fails the check too.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const MAX_LINES = 600;
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SRC = 'packages/server/src';
const ALLOWED = new Set(); // none today
const EXEMPT =
  /(\.test\.ts|\.fixture\.ts|\/test-helpers\.ts)$|^packages\/server\/src\/(test|db\/migrations)\/|\/generated\//;

function* sources(dir) {
  for (const e of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory()) yield* sources(rel);
    else if (rel.endsWith('.ts') && !EXEMPT.test(rel)) yield rel;
  }
}

const problems = [];
for (const file of sources(SRC)) {
  const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
  const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
  if (lines > MAX_LINES && !ALLOWED.has(file))
    problems.push(`${file}: ${lines} lines (at most ${MAX_LINES})`);
  if (lines <= MAX_LINES && ALLOWED.has(file)) {
    problems.push(
      `${file}: ${lines} lines, within the limit: remove it from ALLOWED in scripts/check-file-sizes.mjs`,
    );
  }
}
for (const file of ALLOWED) {
  if (!fs.existsSync(path.join(ROOT, file))) problems.push(`${file}: listed in ALLOWED but does not exist`);
}
if (problems.length > 0) {
  process.stderr.write(`File sizes:\n${problems.map((p) => `  ${p}`).join('\n')}\n`);
  process.exit(1);
}
process.stdout.write(
  `file sizes: every server source file within ${MAX_LINES} lines (${ALLOWED.size} allowed larger)\n`,
);
