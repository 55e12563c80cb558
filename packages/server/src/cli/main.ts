#!/usr/bin/env node
/** Entry point of `pnpm cli` (and `node dist/cli.js`): see docs/cli.md. */
import { runCli } from './program.js';

// The CLI may open the embedded database itself: what it creates is as private as the server's.
process.umask(0o077);

runCli(process.argv, {
  stdout: (s) => process.stdout.write(s),
  stderr: (s) => process.stderr.write(s),
  env: process.env,
}).then((code) => {
  process.exitCode = code;
});
