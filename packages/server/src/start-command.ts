/**
 * What `pnpm start` runs node with, read from the server's start script itself (its last
 * command, `… exec node <flags> dist/main.js`, expanded by the shell for a given environment):
 * the benches start their server the same way, and the tests check the script's flags.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** `packages/server`. */
export const SERVER_PACKAGE_DIR = path.resolve(fileURLToPath(new URL('..', import.meta.url)));

export interface StartCommand {
  /** node's flags, as the shell expands them (`dist/main.js` left out). */
  nodeArgs: string[];
  /** Variables the command sets for node (`MALLOC_ARENA_MAX`). */
  env: Record<string, string>;
}

/** The start script's node flags and variables for a process with `env` (only `env`: nothing else of this process's). */
export function startCommand(env: Record<string, string | undefined>): StartCommand {
  const pkg = JSON.parse(fs.readFileSync(path.join(SERVER_PACKAGE_DIR, 'package.json'), 'utf8')) as {
    scripts: { start: string };
  };
  const last = (pkg.scripts.start.split('&&').pop() ?? '').trim();
  if (!/\bexec node\b.*\bdist\/main\.js$/.test(last)) {
    throw new Error(`unexpected start command (want "… exec node … dist/main.js"): ${last}`);
  }
  // The same command, with a node that prints what it was given instead of the server.
  const probe = `exec ${JSON.stringify(process.execPath)} -e 'process.stdout.write(JSON.stringify({ arena: process.env.MALLOC_ARENA_MAX, argv: process.argv.slice(1) }))' --`;
  const out = JSON.parse(
    execFileSync('sh', ['-c', last.replace(/\bexec node\b/, probe)], {
      cwd: SERVER_PACKAGE_DIR,
      env: { PATH: process.env.PATH, ...env },
      encoding: 'utf8',
    }),
  ) as { arena?: string; argv: string[] };
  return {
    nodeArgs: out.argv.filter((a) => a !== 'dist/main.js'),
    env: out.arena === undefined ? {} : { MALLOC_ARENA_MAX: out.arena },
  };
}
