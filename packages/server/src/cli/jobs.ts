import type { EntityManager } from '@mikro-orm/postgresql';
import { type Command, InvalidArgumentError, Option } from 'commander';
import type { Database } from '../db/orm.js';
import type { WorkspacesService } from '../domains/workspaces/service.js';
import type { JobView } from '../runs/jobs.js';
import type { RunKind, RunStatus } from '../runs/types.js';

/** What `buildProgram` lends a command group (see program.ts). */
export interface CommandKit {
  run: <A extends unknown[]>(
    fn: (
      ctx: { db: Database; em: EntityManager; svc: WorkspacesService },
      ...args: A
    ) => Promise<{ human: string; json: unknown }>,
  ) => (...args: A) => Promise<void>;
  jsonOption: () => Option;
  table: (rows: string[][]) => string;
}

const STATUSES = ['pending', 'running', 'failed', 'completed', 'cancelled'] as const;
const KINDS = ['turn', 'autonomous', 'rag_index'] as const;

const parseLimit = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 1000) {
    throw new InvalidArgumentError('limit must be an integer from 1 to 1000');
  }
  return n;
};

const age = (s: number) =>
  s < 120
    ? `${s}s`
    : s < 7200
      ? `${Math.floor(s / 60)}m`
      : s < 172_800
        ? `${Math.floor(s / 3600)}h`
        : `${Math.floor(s / 86_400)}d`;

const oneLine = (s: string | null, max = 60) => {
  if (!s) return '-';
  const flat = s.replace(/\s+/g, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
};

function jobsTable(table: CommandKit['table'], jobs: JobView[]): string {
  return table([
    [
      'ID',
      'KIND',
      'WORKSPACE',
      'STATUS',
      'ATTEMPTS',
      'LEASE OWNER',
      'LEASE EXPIRES',
      'NOT BEFORE',
      'AGE',
      'LAST ERROR',
    ],
    ...jobs.map((j) => [
      j.id,
      j.kind,
      j.workspaceName ?? j.workspaceId,
      j.waiting ? `${j.status} (waiting)` : j.status,
      `${j.attempts}/${j.maxAttempts}`,
      j.leaseOwner ?? '-',
      j.leaseExpiresAt ?? '-',
      j.notBefore ?? '-',
      age(j.ageSeconds),
      oneLine(j.error),
    ]),
  ]);
}

/** `jobs list` and `jobs cancel`: the run engine's jobs, of every kind (docs/cli.md). */
export function registerJobCommands(program: Command, kit: CommandKit): void {
  const jobs = program.command('jobs').description("list and cancel the run engine's jobs (every kind)");
  jobs
    .command('list')
    .description('jobs newest first: by default those queued or running')
    .addOption(
      new Option('--status <status>', 'only jobs in this status (default: pending and running)').choices(
        STATUSES,
      ),
    )
    .addOption(new Option('--kind <kind>', 'only jobs of this kind').choices(KINDS))
    .option('--workspace <workspace>', 'only jobs of this workspace (id or name)')
    .option('--limit <n>', 'at most this many jobs (1 to 1000)', parseLimit, 50)
    .addOption(kit.jsonOption())
    .action(
      kit.run(
        async (
          { em, svc },
          opts: { status?: RunStatus; kind?: RunKind; workspace?: string; limit: number },
        ) => {
          const { listJobs } = await import('../runs/jobs.js');
          const ws = opts.workspace ? await svc.requireWorkspace(opts.workspace) : undefined;
          const list = await listJobs(em, {
            statuses: opts.status ? [opts.status] : ['pending', 'running'],
            kind: opts.kind,
            workspaceId: ws?.id,
            limit: opts.limit,
          });
          return { json: { jobs: list }, human: list.length ? jobsTable(kit.table, list) : 'No jobs.' };
        },
      ),
    );
  jobs
    .command('cancel')
    .description('cancel a queued or running job; a cancelled rag_index marks its document failed')
    .argument('<runId>', 'the job id shown by "jobs list"')
    .addOption(kit.jsonOption())
    .action(
      kit.run(async ({ em, db }, runId: string) => {
        const [{ cancelJob }, { RAG_INDEX_KIND, markIndexCancelled }] = await Promise.all([
          import('../runs/jobs.js'),
          import('../domains/rag/indexing.js'),
        ]);
        const { before, run } = await em.transactional(async (tx) => {
          const res = await cancelJob(tx, runId.trim(), { distributed: db.kind === 'server' });
          if (res.run.kind === RAG_INDEX_KIND) {
            await markIndexCancelled(tx, String(res.run.input.documentId));
          }
          return res;
        });
        const how =
          run.status === 'cancelled' && before === 'running' && run.leaseOwner
            ? `; its worker (${run.leaseOwner}) stops and writes run.cancelled`
            : '';
        return {
          json: {
            job: { id: run.id, kind: run.kind, workspaceId: run.workspaceId, status: run.status, before },
          },
          human: `Cancelled ${run.kind} job ${run.id} (was ${before})${how}.`,
        };
      }),
    );
}
