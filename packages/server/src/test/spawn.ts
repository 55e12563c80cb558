import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { SERVER_PACKAGE_DIR } from '../start-command.js';

/** packages/server: the working directory of spawned server and CLI processes. */
export const SERVER_DIR = SERVER_PACKAGE_DIR;

/** The parent's environment without anything that would pick a database or data directory. */
export function cleanEnv(extra: Record<string, string | undefined>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(env)) {
    if (k === 'DATABASE_URL' || k === 'DATA_DIR' || k === 'INIT_CWD' || k.startsWith('INIT_')) delete env[k];
  }
  for (const [k, v] of Object.entries(extra)) if (v !== undefined) env[k] = v;
  return env;
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `tsx src/cli/main.ts …args` as a child process. */
export function runCliProcess(args: string[], env: Record<string, string | undefined>): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'src/cli/main.ts', ...args],
      { cwd: SERVER_DIR, env: cleanEnv(env), timeout: 240_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/**
 * Runs the CLI in this process: `runCli` with captured output and an environment built as
 * `cleanEnv` builds a child's (process.env is not touched). Unlike `src/cli/main.ts` it sets
 * no umask (process-wide) and reads no stdin: cases about file modes of a database the CLI
 * creates, stdin, or the entry point itself belong to `runCliProcess`. Each command closes the
 * database it opened before `runCli` resolves.
 */
export async function runCliInProcess(
  args: string[],
  env: Record<string, string | undefined>,
): Promise<CliResult> {
  const { runCli } = await import('../cli/program.js');
  let stdout = '';
  let stderr = '';
  const code = await runCli(['node', 'cli', ...args], {
    stdout: (s) => {
      stdout += s;
    },
    stderr: (s) => {
      stderr += s;
    },
    env: cleanEnv(env),
  });
  return { code, stdout, stderr };
}

/** Starts `tsx src/main.ts` as a child process (the server as `pnpm start` runs it). */
export function spawnServerProcess(env: Record<string, string | undefined>): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: SERVER_DIR,
    env: cleanEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}
