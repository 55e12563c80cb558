import type { EntityManager } from '@mikro-orm/postgresql';
import { type Command, InvalidArgumentError, Option } from 'commander';
import type { MembershipEntity, Role } from '../domains/workspaces/entities.js';
import type { WorkspacesService } from '../domains/workspaces/service.js';
import { parseEmail, parseName } from './args.js';
import type { CliIo } from './io.js';
import type { CommandResult } from './storage.js';

/** What `buildProgram` lends the people commands (see program.ts). */
export interface CommandKit {
  io: CliIo;
  jsonOption: () => Option;
  table: (rows: string[][]) => string;
  run: <A extends unknown[]>(
    fn: (
      ctx: { em: EntityManager; svc: WorkspacesService; m: { MembershipEntity: typeof MembershipEntity } },
      ...args: A
    ) => Promise<CommandResult>,
  ) => (...args: A) => Promise<void>;
}

/** The people commands' modules, loaded with the database layer. */
const loadPeople = async (env: Record<string, string | undefined> = {}) => {
  const [people, members, settings, secret, config] = await Promise.all([
    import('./people.js'),
    import('../domains/members/service.js'),
    import('../auth/settings.js'),
    import('../auth/signing-secret.js'),
    import('../config.js'),
  ]);
  const cfg = config.loadConfig(env);
  return {
    ...people,
    publicOrigin: cfg.publicBaseUrl ? new URL(cfg.publicBaseUrl).origin : `http://localhost:${cfg.port}`,
    membersService: async (em: EntityManager) =>
      new members.MembersService(
        em,
        settings.identitySettingsFromEnv(env),
        await secret.ensureSigningSecret(em, cfg.signingSecret),
      ),
  };
};

const readStdin = async (): Promise<string> => {
  if (process.stdin.isTTY) throw new InvalidArgumentError('give --password, or pipe the password on stdin');
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
};

/** `user …`: accounts, memberships and invitations (docs/cli.md). */
export function registerUserCommands(program: Command, kit: CommandKit): void {
  const { io, jsonOption, run, table } = kit;
  const user = program.command('user').description('manage people: accounts, memberships, invitations');
  user
    .command('add')
    .description('add a user to a workspace (creating the user when new)')
    .argument('<workspace>', 'workspace id or name')
    .argument('<email>', 'the user email', parseEmail)
    .addOption(
      new Option('--role <role>', 'role in the workspace')
        .choices(['owner', 'admin', 'member'])
        .default('member'),
    )
    .option('--password <password>', 'password of a new user (stored as an argon2 hash)')
    .addOption(jsonOption())
    .action(
      run(async ({ svc, em, m }, wsRef: string, email: string, opts: { role: Role; password?: string }) => {
        const ws = await svc.requireWorkspace(wsRef);
        const user = await svc.ensureUser(email, opts.password);
        await svc.ensureMembership(ws.id, user.id, opts.role);
        const membership = await em
          .fork()
          .findOneOrFail(m.MembershipEntity, { workspaceId: ws.id, userId: user.id });
        const role = membership.role;
        const already = role !== opts.role ? ` (already a member as ${role}; role unchanged)` : '';
        return {
          json: {
            user: { id: user.id, email, created: user.created },
            membership: { workspaceId: ws.id, role },
          },
          human: `${user.created ? 'Created' : 'Found'} user ${email} (${user.id}); member of "${ws.name}" as ${role}${already}.`,
        };
      }),
    );

  user
    .command('create')
    .description('create a person’s account (no workspace; add or invite them to one)')
    .argument('<email>', 'the user email', parseEmail)
    .option('--password <password>', 'initial password (at least 8 characters; omit for OIDC-only accounts)')
    .option('--name <name>', 'display name', parseName('name'))
    .addOption(jsonOption())
    .action(
      run(async ({ em }, email: string, opts: { password?: string; name?: string }) => {
        const { createUser } = await loadPeople(io.env);
        const created = await createUser(em, { email, password: opts.password, name: opts.name });
        return {
          json: { user: created },
          human: `Created user ${created.email} (${created.id}).`,
        };
      }),
    );

  user
    .command('list')
    .description('list accounts with their workspaces and roles')
    .option('--workspace <workspace>', 'only members of this workspace (id or name)')
    .addOption(jsonOption())
    .action(
      run(async ({ em, svc }, opts: { workspace?: string }) => {
        const { listUsers } = await loadPeople(io.env);
        const ws = opts.workspace ? await svc.requireWorkspace(opts.workspace) : undefined;
        const users = await listUsers(em, ws?.id);
        const rows = [
          ['EMAIL', 'ID', 'PASSWORD', 'WORKSPACES'],
          ...users.map((u) => [
            u.email,
            u.id,
            u.hasPassword ? 'yes' : 'no',
            u.workspaces.map((w) => `${w.name} (${w.role})`).join(', ') || '-',
          ]),
        ];
        return { json: { users }, human: users.length ? table(rows) : 'No users.' };
      }),
    );

  user
    .command('invite')
    .description(
      'invite someone to a workspace: prints the signed, single-use link (and mails it with SMTP_URL)',
    )
    .argument('<workspace>', 'workspace id or name')
    .argument('<email>', 'the invited email', parseEmail)
    .addOption(
      new Option('--role <role>', 'role in the workspace')
        .choices(['owner', 'admin', 'member'])
        .default('member'),
    )
    .addOption(jsonOption())
    .action(
      run(async ({ em, svc }, wsRef: string, email: string, opts: { role: Role }) => {
        const { membersService, publicOrigin } = await loadPeople(io.env);
        const ws = await svc.requireWorkspace(wsRef);
        const members = await membersService(em);
        const r = await members.invite({ kind: 'operator' }, ws.id, { email, role: opts.role }, publicOrigin);
        return {
          json: r,
          human:
            `Invited ${email} to "${ws.name}" as ${opts.role} (expires ${r.invitation.expiresAt}; works once).` +
            `${r.mailed ? ' Mailed.' : ''}\n${r.url}`,
        };
      }),
    );

  user
    .command('set-role')
    .description('change a member’s role (a workspace always keeps one owner)')
    .argument('<workspace>', 'workspace id or name')
    .argument('<email>', 'the member’s email', parseEmail)
    .argument('<role>', 'owner, admin or member', (v: string) => {
      if (v !== 'owner' && v !== 'admin' && v !== 'member') {
        throw new InvalidArgumentError('role must be owner, admin or member');
      }
      return v as Role;
    })
    .addOption(jsonOption())
    .action(
      run(async ({ em, svc }, wsRef: string, email: string, role: Role) => {
        const { membersService, requireUserId } = await loadPeople(io.env);
        const ws = await svc.requireWorkspace(wsRef);
        const userId = await requireUserId(em, email);
        const member = await (await membersService(em)).changeRole({ kind: 'operator' }, ws.id, userId, role);
        return { json: { member }, human: `${email} is now ${member.role} of "${ws.name}".` };
      }),
    );

  user
    .command('remove')
    .description('remove a member from a workspace (not the last owner)')
    .argument('<workspace>', 'workspace id or name')
    .argument('<email>', 'the member’s email', parseEmail)
    .addOption(jsonOption())
    .action(
      run(async ({ em, svc }, wsRef: string, email: string) => {
        const { membersService, requireUserId } = await loadPeople(io.env);
        const ws = await svc.requireWorkspace(wsRef);
        const userId = await requireUserId(em, email);
        await (await membersService(em)).removeMember({ kind: 'operator' }, ws.id, userId);
        return {
          json: { removed: true, userId, workspaceId: ws.id },
          human: `Removed ${email} from "${ws.name}".`,
        };
      }),
    );

  user
    .command('set-password')
    .description('set a person’s password (their sessions are signed out)')
    .argument('<email>', 'the user email', parseEmail)
    .option('--password <password>', 'the new password (at least 8 characters); else read from stdin')
    .addOption(jsonOption())
    .action(
      run(async ({ em }, email: string, opts: { password?: string }) => {
        const { setPassword } = await loadPeople(io.env);
        const password = opts.password ?? (await readStdin()).replace(/\r?\n$/, '');
        const r = await setPassword(em, email, password);
        return {
          json: { userId: r.userId, sessionsRevoked: r.sessionsRevoked },
          human: `Password of ${email} set; ${r.sessionsRevoked} session(s) signed out.`,
        };
      }),
    );
}
