import fs from 'node:fs';
import type { EntityManager } from '@mikro-orm/postgresql';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { ConfigError, loadConfig } from '../config.js';
import type { Database } from '../db/orm.js';
import { MICROS_PER_USD } from '../domains/workspaces/amounts.js';
import type { WorkspacesService } from '../domains/workspaces/service.js';
import { AppError, appError } from '../errors/index.js';
import { parseEmail, parseName, parsePositiveUsd, parseQuota, parseUsd } from './args.js';
import type { CliIo } from './io.js';
import { registerJobCommands } from './jobs.js';
import { type CommandResult, registerStorageCommands } from './storage.js';
import { registerUserCommands } from './users.js';

/** The database layer loads lazily: usage errors and --help answer without loading the ORM. */
const loadDb = async () => {
  const [orm, embedded, service, entities, mapped] = await Promise.all([
    import('../db/orm.js'),
    import('../db/embedded.js'),
    import('../domains/workspaces/service.js'),
    import('../domains/workspaces/entities.js'),
    import('../entities.js'),
  ]);
  return {
    ...orm,
    embeddedPgDir: embedded.embeddedPgDir,
    lockHolder: embedded.lockHolder,
    ...service,
    ...entities,
    allEntities: mapped.allEntities,
  };
};
type DbModules = Awaited<ReturnType<typeof loadDb>>;

export type { CliIo } from './io.js';

/** Exit codes: 0 success, 1 the command failed, 2 the command line or configuration is wrong. */
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

interface Ctx {
  db: Database;
  em: EntityManager;
  svc: WorkspacesService;
  m: DbModules;
}

// ---------- output ----------

const usd = (micros: number) => `$${(micros / MICROS_PER_USD).toFixed(2)}`;
const quotaText = (q: number | null) => (q === null ? 'unlimited' : String(q));

function table(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/**
 * Builds the `ai-suite` operator CLI. Each command opens the database (connecting through a
 * running server's socket when it owns the embedded data directory), runs one service call
 * and closes it again.
 */
export function buildProgram(io: CliIo, json: boolean): Command {
  const program = new Command('ai-suite')
    .description(
      'Operator CLI of AI Suite. Uses DATABASE_URL when set, otherwise the embedded database under DATA_DIR ' +
        '(through the running server when it has it open).',
    )
    .configureOutput({
      writeOut: io.stdout,
      writeErr: io.stderr,
      outputError: (str, write) =>
        write(
          json ? `${JSON.stringify({ error: str.replace(/^error: /, '').trim(), code: 'USAGE' })}\n` : str,
        ),
    })
    .exitOverride()
    .helpCommand(true);

  /** A note on stderr: plain text, or one JSON line with `--json` (stdout stays the result). */
  const note = (kind: 'database' | 'warning', text: string) =>
    io.stderr(
      json ? `${JSON.stringify({ [kind]: text })}\n` : `${kind === 'warning' ? 'warning: ' : ''}${text}\n`,
    );

  /**
   * Opens the database, runs `fn`, prints its result, closes the database. Says on stderr
   * which database it is, and warns when the command created an empty embedded database: the
   * usual sign of a CLI run with another DATA_DIR than the server's.
   */
  const run =
    <A extends unknown[]>(fn: (ctx: Ctx, ...args: A) => Promise<CommandResult>) =>
    async (...args: A) => {
      const config = loadConfig(io.env);
      const m = await loadDb();
      const created = !config.databaseUrl && !fs.existsSync(m.embeddedPgDir(config.dataDir));
      const db = await m.openDatabase({
        entities: m.allEntities,
        databaseUrl: config.databaseUrl,
        dataDir: config.dataDir,
        poolMax: 2,
        as: 'cli',
      });
      note('database', describeDatabase(config, db, m.lockHolder));
      try {
        const em = db.orm.em.fork() as unknown as EntityManager;
        const out = await fn({ db, em, svc: new m.WorkspacesService(em), m }, ...args);
        io.stdout(json ? `${JSON.stringify(out.json, null, 2)}\n` : `${out.human}\n`);
        if (out.failure) throw appError('PARTLY_FAILED', { failure: out.failure });
      } finally {
        if (
          created &&
          (await new m.WorkspacesService(db.orm.em.fork() as unknown as EntityManager).listWorkspaces())
            .length === 0
        ) {
          note(
            'warning',
            `${config.dataDir} held no database: this command created a new, empty one. If your server ` +
              'runs with another DATA_DIR (or DATABASE_URL), run the CLI with the same setting.',
          );
        }
        await db.close();
      }
    };
  const jsonOption = () => new Option('--json', 'print one JSON document on stdout (stable shape)');

  // ---------- workspace ----------
  const workspace = program.command('workspace').description('create and list workspaces');
  workspace
    .command('create')
    .description('create a workspace')
    .argument('<name>', 'workspace name (unique, case-insensitive)', parseName('Workspace name'))
    .option('--credits-usd <usd>', 'initial credit grant in dollars, e.g. 25 or 12.50', parseUsd)
    .option('--monthly-token-quota <tokens>', 'monthly token quota, or "unlimited" (default)', parseQuota)
    .addOption(jsonOption())
    .action(
      run(
        async ({ em, m }, name: string, opts: { creditsUsd?: number; monthlyTokenQuota?: number | null }) => {
          const ws = await em.transactional(async (tx) => {
            const svc = new m.WorkspacesService(tx);
            const created = await svc.createWorkspace({
              name,
              monthlyTokenQuota: opts.monthlyTokenQuota ?? null,
            });
            if (opts.creditsUsd) await svc.grantCredits(created.id, opts.creditsUsd, 'initial grant (CLI)');
            return created;
          });
          const fresh = await new m.WorkspacesService(em.fork()).requireWorkspace(ws.id);
          const dto = m.toWorkspaceDto(fresh);
          return {
            json: { workspace: dto },
            human: [
              `Created workspace "${dto.name}" (${dto.id})`,
              `  credits:             ${usd(Number(fresh.creditBalanceMicros))}`,
              `  monthly token quota: ${quotaText(dto.monthlyTokenQuota)}`,
            ].join('\n'),
          };
        },
      ),
    );
  workspace
    .command('list')
    .description('list all workspaces')
    .addOption(jsonOption())
    .action(
      run(async ({ svc, m }) => {
        const list = (await svc.listWorkspaces()).map(m.toWorkspaceDto);
        return {
          json: { workspaces: list },
          human:
            list.length === 0
              ? 'No workspaces.'
              : table([
                  ['ID', 'NAME', 'STATUS', 'CREDITS', 'TOKEN QUOTA', 'CREATED'],
                  ...list.map((w) => [
                    w.id,
                    w.name,
                    w.status,
                    `$${w.creditBalanceUsd.toFixed(2)}`,
                    quotaText(w.monthlyTokenQuota),
                    w.createdAt,
                  ]),
                ]),
        };
      }),
    );

  // ---------- key ----------
  const key = program.command('key').description('create, list and revoke API keys');
  key
    .command('create')
    .description('create an API key; the key is printed once and cannot be shown again')
    .argument('<workspace>', 'workspace id or name')
    .option('--name <name>', 'a name to recognise the key by', parseName('Key name'))
    .option('--as <email>', 'act as this member (must be owner or admin)', parseEmail)
    .addOption(jsonOption())
    .action(
      run(async ({ svc, em, m }, wsRef: string, opts: { name?: string; as?: string }) => {
        const ws = await svc.requireWorkspace(wsRef);
        let actingUserId: string | undefined;
        if (opts.as) {
          const user = await em.findOne(m.UserEntity, { email: opts.as });
          if (!user) throw appError('USER_NOT_FOUND', { email: opts.as });
          actingUserId = user.id;
        }
        const { key: plaintext, apiKey } = await svc.createApiKey({
          workspaceId: ws.id,
          name: opts.name ?? null,
          actingUserId,
        });
        const dto = m.toApiKeyDto(apiKey);
        if (!json) {
          io.stderr(
            `Created API key ${dto.id}${dto.name ? ` "${dto.name}"` : ''} for workspace "${ws.name}". ` +
              'Store it now: it is shown only once.\n',
          );
        }
        return { json: { key: plaintext, apiKey: dto }, human: plaintext };
      }),
    );
  key
    .command('list')
    .description('list the active API keys of a workspace (never the keys themselves)')
    .argument('<workspace>', 'workspace id or name')
    .option('--all', 'include revoked keys')
    .addOption(jsonOption())
    .action(
      run(async ({ svc, m }, wsRef: string, opts: { all?: boolean }) => {
        const ws = await svc.requireWorkspace(wsRef);
        const keys = (await svc.listApiKeys(ws.id, { includeRevoked: opts.all })).map(m.toApiKeyDto);
        return {
          json: { apiKeys: keys },
          human:
            keys.length === 0
              ? `No API keys in "${ws.name}".`
              : table([
                  ['ID', 'NAME', 'PREFIX', 'CREATED', 'LAST USED', 'STATUS', 'REQUESTS'],
                  ...keys.map((k) => [
                    k.id,
                    k.name ?? '-',
                    k.prefix,
                    k.createdAt,
                    k.lastUsedAt ?? 'never',
                    k.revokedAt ? 'revoked' : 'active',
                    String(k.usage.requests),
                  ]),
                ]),
        };
      }),
    );
  key
    .command('revoke')
    .description('revoke an API key (it answers 401 from then on)')
    .argument('<workspace>', 'workspace id or name')
    .argument('<keyId>', 'the key id shown by "key list"')
    .addOption(jsonOption())
    .action(
      run(async ({ svc, m }, wsRef: string, keyId: string) => {
        const ws = await svc.requireWorkspace(wsRef);
        const dto = m.toApiKeyDto(await svc.revokeApiKey(ws.id, keyId.trim()));
        return { json: { apiKey: dto }, human: `Revoked API key ${dto.id} of "${ws.name}".` };
      }),
    );

  // ---------- credits, quota ----------
  program
    .command('credits')
    .description('manage prepaid credits')
    .command('grant')
    .description('add credits to a workspace')
    .argument('<workspace>', 'workspace id or name')
    .argument('<usd>', 'amount in dollars, e.g. 10 or 2.50', parsePositiveUsd)
    .option('--reason <text>', 'ledger note', 'grant (CLI)')
    .addOption(jsonOption())
    .action(
      run(async ({ svc }, wsRef: string, micros: number, opts: { reason: string }) => {
        const ws = await svc.requireWorkspace(wsRef);
        const { balanceMicros } = await svc.grantCredits(ws.id, micros, opts.reason);
        return {
          json: {
            workspaceId: ws.id,
            grantedUsd: micros / MICROS_PER_USD,
            creditBalanceUsd: balanceMicros / MICROS_PER_USD,
          },
          human: `Granted ${usd(micros)} to "${ws.name}": balance ${usd(balanceMicros)}.`,
        };
      }),
    );
  program
    .command('quota')
    .description('manage the monthly token quota')
    .command('set')
    .description('set the monthly token quota of a workspace')
    .argument('<workspace>', 'workspace id or name')
    .argument('<tokens>', 'a non-negative integer, or "unlimited"', parseQuota)
    .addOption(jsonOption())
    .action(
      run(async ({ svc, m }, wsRef: string, quota: number | null) => {
        const ws = await svc.requireWorkspace(wsRef);
        const dto = m.toWorkspaceDto(await svc.setMonthlyTokenQuota(ws.id, quota));
        return {
          json: { workspace: dto },
          human: `Monthly token quota of "${dto.name}": ${quotaText(dto.monthlyTokenQuota)}.`,
        };
      }),
    );

  program
    .command('rag-quota')
    .description('manage the monthly document-question (RAG) query quota')
    .command('set')
    .description('set the monthly RAG query quota of a workspace ("default" = RAG_MONTHLY_QUERY_QUOTA)')
    .argument('<workspace>', 'workspace id or name')
    .argument('<queries>', 'a non-negative integer, "unlimited" or "default"', (v: string) => {
      const s = v.trim().toLowerCase();
      if (s === 'default') return undefined;
      if (s === 'unlimited') return null;
      if (!/^\d+$/.test(s) || Number(s) > 2_147_483_647) {
        throw new InvalidArgumentError('Quota must be a non-negative integer, "unlimited" or "default"');
      }
      return Number(s);
    })
    .addOption(jsonOption())
    .action(
      run(async ({ svc, em }, wsRef: string, quota: number | null | undefined) => {
        const ws = await svc.requireWorkspace(wsRef);
        // Null in the column follows RAG_MONTHLY_QUERY_QUOTA; an explicit "unlimited" is stored as
        // the largest integer, so the default cannot override it.
        const value = quota === undefined ? null : quota === null ? 2_147_483_647 : quota;
        await em.execute('update workspaces set rag_monthly_query_quota = ? where id = ?', [value, ws.id]);
        const text =
          quota === undefined
            ? 'the RAG_MONTHLY_QUERY_QUOTA default'
            : quota === null
              ? 'unlimited'
              : String(quota);
        return {
          json: {
            workspace: { id: ws.id, name: ws.name },
            ragMonthlyQueryQuota: quota === undefined ? 'default' : quota,
          },
          human: `Monthly RAG query quota of "${ws.name}": ${text}.`,
        };
      }),
    );

  // ---------- app ----------
  program
    .command('app')
    .description('manage apps')
    .command('create')
    .description('create an app in a workspace')
    .argument('<workspace>', 'workspace id or name')
    .argument('<name>', 'app name', parseName('App name'))
    .option('--system-prompt <text>', 'the system prompt of the app')
    .option('--model <id>', 'the model the app uses')
    .addOption(jsonOption())
    .action(
      run(async ({ svc }, wsRef: string, name: string, opts: { systemPrompt?: string; model?: string }) => {
        const ws = await svc.requireWorkspace(wsRef);
        const app = await svc.createApp({
          workspaceId: ws.id,
          name,
          systemPrompt: opts.systemPrompt ?? null,
          modelId: opts.model ?? null,
        });
        return {
          json: {
            app: {
              id: app.id,
              workspaceId: ws.id,
              name: app.name,
              systemPrompt: opts.systemPrompt ?? null,
              model: opts.model ?? null,
              createdAt: app.createdAt,
            },
          },
          human: `Created app "${app.name}" (${app.id}) in "${ws.name}".`,
        };
      }),
    );

  registerUserCommands(program, { io, jsonOption, run, table });
  registerJobCommands(program, { run, jsonOption, table });
  registerStorageCommands(program, { io, json, jsonOption, run });

  return program;
}

/** Which database a command works on, for the operator (never a password). */
function describeDatabase(
  config: { databaseUrl?: string; dataDir: string },
  db: Database,
  lockHolder: (dataDir: string) => { pid: number } | undefined,
): string {
  if (config.databaseUrl) {
    const u = new URL(config.databaseUrl);
    const who = u.username ? `${decodeURIComponent(u.username)}@` : '';
    return `Database: PostgreSQL server ${who}${u.hostname}${u.port ? `:${u.port}` : ''}${u.pathname} (DATABASE_URL)`;
  }
  const via = db.attached
    ? `, through the running server (pid ${lockHolder(config.dataDir)?.pid ?? 'unknown'})`
    : '';
  return `Database: embedded, in ${config.dataDir} (DATA_DIR)${via}`;
}

/** One line for the operator, whatever went wrong. */
function describe(err: unknown): { message: string; code?: string; exit: number } {
  if (err instanceof ConfigError) return { message: err.message.replace(/\n\s*/g, ' '), exit: EXIT_USAGE };
  if (err instanceof AppError) return { message: err.message, code: err.code, exit: EXIT_FAILED };
  if (err instanceof Error && err.name === 'UniqueConstraintViolationException') {
    return { message: 'It already exists (a concurrent change got there first)', exit: EXIT_FAILED };
  }
  const message = err instanceof Error ? err.message : String(err);
  return { message: message.split('\n')[0] ?? 'unknown error', exit: EXIT_FAILED };
}

/** Runs the CLI on `argv` (as `process.argv`) and returns the exit code. Never throws. */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const json = argv.includes('--json');
  const program = buildProgram(io, json);
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander has already printed its message (or the help).
      return err.exitCode === 0 ? 0 : EXIT_USAGE;
    }
    const d = describe(err);
    io.stderr(
      json
        ? `${JSON.stringify({ error: d.message, ...(d.code ? { code: d.code } : {}) })}\n`
        : `error: ${d.message}\n`,
    );
    return d.exit;
  }
}
