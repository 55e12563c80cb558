#!/usr/bin/env node
/** Entry point of `pnpm cli` (and `node dist/cli.js`): see docs/cli.md. */
import { runCli } from './program.js';

runCli(process.argv, {
  stdout: (s) => process.stdout.write(s),
  stderr: (s) => process.stderr.write(s),
  env: process.env,
}).then((code) => {
  process.exitCode = code;
});
