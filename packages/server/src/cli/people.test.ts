import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer } from '../server.js';
import { startTestServer } from '../test/harness.js';
import { type CliResult, runCliInProcess, runCliProcess } from '../test/spawn.js';

/**
 * The people commands of the operator CLI against a running server (the embedded database
 * through its socket, or the PostgreSQL server), checked over HTTP. Commands run in this
 * process; the first and the last as child processes (the real entry point, its exit codes).
 */
const onServer = Boolean(process.env.DATABASE_URL);
const SLOW = 300_000;

let url: string;
let cliEnv: Record<string, string>;
let close: () => Promise<void>;
let dataDir: string | undefined;

beforeAll(async () => {
  if (onServer) {
    const ts = await startTestServer();
    url = ts.url;
    cliEnv = { DATABASE_URL: ts.db.databaseUrl as string, PUBLIC_BASE_URL: 'https://suite.example.com' };
    close = () => ts.close();
  } else {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-cli-people-'));
    const server = await createServer({ env: { DATA_DIR: dataDir, LOG_LEVEL: 'silent' } });
    url = (await server.listen(0, '127.0.0.1')).url;
    cliEnv = { DATA_DIR: dataDir, PUBLIC_BASE_URL: 'https://suite.example.com' };
    close = () => server.close();
  }
}, SLOW);
afterAll(async () => {
  await close?.();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

const cli = (...args: string[]) => runCliInProcess(args, cliEnv);
const cliProcess = (...args: string[]) => runCliProcess(args, cliEnv);
const json = <T>(r: CliResult): T => {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as T;
};
const api = (p: string, init: { method?: string; token?: string; json?: unknown } = {}) =>
  fetch(`${url}/api/v1${p}`, {
    method: init.method ?? 'GET',
    headers: {
      ...(init.token ? { authorization: `Bearer ${init.token}` } : {}),
      ...(init.json ? { 'content-type': 'application/json' } : {}),
    },
    body: init.json ? JSON.stringify(init.json) : undefined,
  });
const signIn = async (email: string, password: string) => {
  const res = await api('/auth/sign-in', { method: 'POST', json: { email, password } });
  return {
    status: res.status,
    body: (await res.json()) as { token: string; workspace: { role: string } | null },
  };
};

describe(`CLI: people (${onServer ? 'PostgreSQL server' : 'embedded, through the running server'})`, () => {
  it(
    'creates users, invites with a printed link, sets roles and passwords, removes, keeps an owner',
    async () => {
      json(await cliProcess('workspace', 'create', 'People Corp', '--json'));
      const created = json<{ user: { id: string; email: string } }>(
        await cli(
          'user',
          'create',
          'Ada@Example.com',
          '--password',
          'first password',
          '--name',
          'Ada',
          '--json',
        ),
      );
      expect(created.user.email).toBe('ada@example.com');
      const dup = await cli('user', 'create', 'ada@example.com');
      expect(dup.code).toBe(1);
      expect(dup.stderr).toMatch(/already exists/);

      json(await cli('user', 'add', 'People Corp', 'ada@example.com', '--role', 'owner', '--json'));
      expect((await signIn('ada@example.com', 'first password')).status).toBe(200);

      // The invitation link is printed; accepting it over HTTP joins the workspace.
      const inv = await cli('user', 'invite', 'People Corp', 'bob@example.com', '--role', 'admin');
      expect(inv.code, inv.stderr).toBe(0);
      const link = /https:\/\/suite\.example\.com\/invitations\/accept#token=(svc_iv_\S+)/.exec(inv.stdout);
      expect(link, inv.stdout).not.toBeNull();
      const accepted = await api('/auth/invitations/accept', {
        method: 'POST',
        json: { token: link?.[1], password: 'bobs password' },
      });
      expect(accepted.status).toBe(200);

      const listed = json<{ users: { email: string; workspaces: { name: string; role: string }[] }[] }>(
        await cli('user', 'list', '--workspace', 'People Corp', '--json'),
      );
      expect(listed.users.map((u) => [u.email, u.workspaces[0]?.role])).toEqual([
        ['ada@example.com', 'owner'],
        ['bob@example.com', 'admin'],
      ]);

      // The last owner cannot be demoted, even by the operator.
      const demote = await cli('user', 'set-role', 'People Corp', 'ada@example.com', 'member');
      expect(demote.code).toBe(1);
      expect(demote.stderr).toMatch(/at least one owner/);
      const promote = json<{ member: { role: string } }>(
        await cli('user', 'set-role', 'People Corp', 'bob@example.com', 'owner', '--json'),
      );
      expect(promote.member.role).toBe('owner');

      // A new password signs the person out everywhere.
      const before = await signIn('bob@example.com', 'bobs password');
      const pw = json<{ sessionsRevoked: number }>(
        await cli('user', 'set-password', 'bob@example.com', '--password', 'a new password', '--json'),
      );
      expect(pw.sessionsRevoked).toBeGreaterThanOrEqual(2);
      expect((await api('/auth/session', { token: before.body.token })).status).toBe(401);
      expect((await signIn('bob@example.com', 'bobs password')).status).toBe(401);
      expect((await signIn('bob@example.com', 'a new password')).status).toBe(200);

      json(await cli('user', 'remove', 'People Corp', 'bob@example.com', '--json'));
      const after = await signIn('bob@example.com', 'a new password');
      expect(after.body.workspace).toBeNull();
      const bad = await cliProcess('user', 'set-role', 'People Corp', 'ada@example.com', 'king');
      expect(bad.code).toBe(2);
    },
    SLOW,
  );
});
