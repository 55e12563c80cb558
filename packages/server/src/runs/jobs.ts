import type { EntityManager } from '@mikro-orm/postgresql';
import { appError } from '../errors/index.js';
import { busNotification } from './bus.js';
import { runStore, toRun } from './store.js';
import type { RunKind, RunRecord, RunStatus } from './types.js';

/**
 * The operator's view of the run engine's jobs (`pnpm cli jobs …`, docs/cli.md): every kind,
 * every workspace, with what explains a stuck or failing one.
 */
export interface JobView {
  id: string;
  kind: RunKind;
  workspaceId: string;
  workspaceName: string | null;
  status: RunStatus;
  waiting: boolean;
  attempts: number;
  maxAttempts: number;
  leaseOwner: string | null;
  leaseExpiresAt: string | null;
  notBefore: string | null;
  error: string | null;
  createdAt: string;
  ageSeconds: number;
}

export interface JobFilter {
  statuses: RunStatus[];
  kind?: RunKind;
  workspaceId?: string;
  limit: number;
}

type Row = Record<string, unknown>;

const iso = (v: unknown) => (v == null ? null : new Date(v as string).toISOString());

/** Newest first. Statuses `pending`/`running` use the engine's claim index. */
export async function listJobs(em: EntityManager, f: JobFilter): Promise<JobView[]> {
  const where = [`r.status in (${f.statuses.map(() => '?').join(', ')})`];
  const params: unknown[] = [...f.statuses];
  if (f.kind) {
    where.push('r.kind = ?');
    params.push(f.kind);
  }
  if (f.workspaceId) {
    where.push('r.workspace_id = ?');
    params.push(f.workspaceId);
  }
  const rows = await em.execute<Row[]>(
    `select r.*, w.name as workspace_name, extract(epoch from now() - r.created_at) as age
       from runs r left join workspaces w on w.id = r.workspace_id
      where ${where.join(' and ')}
      order by r.created_at desc limit ?`,
    [...params, f.limit],
  );
  return rows.map((r) => {
    const run = toRun(r);
    return {
      id: run.id,
      kind: run.kind,
      workspaceId: run.workspaceId,
      workspaceName: (r.workspace_name as string) ?? null,
      status: run.status,
      waiting: run.waiting,
      attempts: run.attempts,
      maxAttempts: run.maxAttempts,
      leaseOwner: run.leaseOwner,
      leaseExpiresAt: iso(r.lease_expires_at),
      notBefore: iso(r.not_before),
      error: run.error,
      createdAt: run.createdAt.toISOString(),
      ageSeconds: Math.max(0, Math.floor(Number(r.age))),
    };
  });
}

/**
 * Cancels a job of any kind from outside the engine's processes. A queued (or
 * retry-waiting) job ends `cancelled` at once; a running one as `engine.cancel` does it: the
 * worker holding it (told through NOTIFY on the PostgreSQL server, otherwise at its next event
 * write or heartbeat) aborts and writes `run.cancelled`, or the sweep does once a dead
 * worker's lease expires. 404 `Job not found` for an unknown id, 400 `Run is <status>` for one
 * that already ended.
 */
export async function cancelJob(
  em: EntityManager,
  runId: string,
  opts: { distributed: boolean },
): Promise<{ before: RunStatus; run: RunRecord }> {
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(runId)) {
    throw appError('JOB_NOT_FOUND', { runId });
  }
  const current = await runStore.getRun(em, runId);
  if (!current) throw appError('JOB_NOT_FOUND', { runId });
  let done = false;
  if (current.status === 'pending') {
    done = (await runStore.finish(em, runId, null, 'cancelled', {})) !== null;
  }
  if (!done) {
    // Running, or claimed between the read and the statement above.
    const res = await runStore.cancel(em, runId);
    if (!res) {
      const now = await runStore.getRun(em, runId);
      throw appError('RUN_NOT_ACTIVE', { status: now?.status ?? current.status });
    }
    if (res.owner && opts.distributed) {
      const n = busNotification({ t: 'cancel', runId });
      await em.execute('select pg_notify(?, ?)', [n.channel, n.payload]);
    }
  }
  if (opts.distributed) {
    // A run of the same serial key may now start.
    const n = busNotification({ t: 'wake' });
    await em.execute('select pg_notify(?, ?)', [n.channel, n.payload]);
  }
  return { before: current.status, run: (await runStore.getRun(em, runId)) as RunRecord };
}
