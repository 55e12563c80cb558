import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobView } from '../runs/jobs.js';
import { createServer } from '../server.js';
import {
  createTestWorkspace,
  type FakeOpenAI,
  fakeOpenAIEnv,
  startFakeOpenAI,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../test/harness.js';
import { type CliResult, runCliInProcess, runCliProcess } from '../test/spawn.js';

/**
 * `jobs list` and `jobs cancel` beside a running server that executes the jobs: on the
 * embedded database the CLI goes through the server's socket; with DATABASE_URL both talk to
 * the PostgreSQL server (and the cancel reaches the worker through NOTIFY). Commands run in
 * this process; the human listing and the refused cancel as child processes (the real entry).
 */
const onServer = Boolean(process.env.DATABASE_URL);
const SLOW = 300_000;

let fake: FakeOpenAI;
let ts: TestServer;
let cliEnv: Record<string, string>;
let dataDir: string | undefined;
let ws: TestWorkspace;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  const env = { ...fakeOpenAIEnv(fake), RUN_POLL_INTERVAL_MS: '50', RUN_LEASE_MS: '3000' };
  if (onServer) {
    ts = await startTestServer({ env });
    cliEnv = { DATABASE_URL: ts.db.databaseUrl as string };
  } else {
    // This process owns the data directory, as a server started with `pnpm start` would.
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-jobs-'));
    const server = await createServer({ env: { ...env, DATA_DIR: dataDir, LOG_LEVEL: 'silent' } });
    const { url } = await server.listen(0, '127.0.0.1');
    ts = {
      url,
      server,
      db: { drop: async () => undefined },
      api: (p, init = {}) => {
        const { key, json, headers, ...rest } = init;
        const h = new Headers(headers);
        if (key) h.set('authorization', `Bearer ${key}`);
        if (json !== undefined) h.set('content-type', 'application/json');
        return fetch(`${url}/api/v1${p}`, {
          ...rest,
          headers: h,
          body: json !== undefined ? JSON.stringify(json) : rest.body,
        });
      },
      close: () => server.close(),
    };
    cliEnv = { DATA_DIR: dataDir };
  }
  ws = await createTestWorkspace(ts, { name: `Jobs ${randomUUID().slice(0, 8)}`, creditsUsd: '10' });
}, SLOW);

afterAll(async () => {
  await ts?.close();
  await fake?.close();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

const cli = (...args: string[]) => runCliInProcess(args, cliEnv);
const cliProcess = (...args: string[]) => runCliProcess(args, cliEnv);
const json = <T>(r: CliResult): T => {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as T;
};
const em = () => ts.server.deps.em();

async function waitFor<T>(fn: () => Promise<T | undefined | false>, what: string): Promise<T> {
  for (let i = 0; i < 2400; i++) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe(`jobs list and cancel (${onServer ? 'PostgreSQL server' : 'embedded, through the running server'})`, () => {
  let indexRunId: string;
  let documentId: string;
  let fileId: string;
  let retrying: string;
  let failed: string;

  it(
    'lists queued and running jobs of every kind with what explains them, and filters',
    async () => {
      // A storage file whose indexing is executing in the server: its embeddings never answer,
      // retries after the client's timeout included (CLI runs take a while on a busy machine).
      fake.scriptEmbeddings(...Array.from({ length: 20 }, () => ({ hang: true })));
      const fd = new FormData();
      fd.append('kind', 'files');
      fd.append('file[]', new Blob(['Harbour log. '.repeat(200)], { type: 'text/plain' }), 'log.txt');
      const imported = await ts.api(`/workspaces/${ws.workspaceId}/storage/import`, {
        method: 'POST',
        key: ws.apiKey,
        body: fd,
      });
      fileId = ((await imported.json()) as { fileIds: string[] }).fileIds[0] as string;
      const res = await ts.api(`/workspaces/${ws.workspaceId}/storage/files/${fileId}/index`, {
        method: 'POST',
        key: ws.apiKey,
        json: {},
      });
      expect(res.status).toBe(202);
      ({ runId: indexRunId, documentId } = (await res.json()) as { runId: string; documentId: string });
      await waitFor(
        async () => fake.requests.some((r) => r.path.endsWith('/embeddings')),
        'the job to execute',
      );

      // A job waiting for its retry, and one that failed.
      retrying = randomUUID();
      failed = randomUUID();
      await em().execute(
        `insert into runs (id, workspace_id, kind, status, input, attempts, max_attempts, not_before, error, started_at)
         values (?, ?, 'autonomous', 'running', '{}'::jsonb, 1, 3, now() + interval '1 hour', 'upstream went away', now()),
                (?, ?, 'autonomous', 'failed', '{}'::jsonb, 3, 3, null, 'Worker lost: the run lease expired; giving up after 3 attempts', now())`,
        [retrying, ws.workspaceId, failed, ws.workspaceId],
      );

      const all = json<{ jobs: JobView[] }>(
        await cli('jobs', 'list', '--workspace', ws.workspaceId, '--json'),
      );
      const byId = new Map(all.jobs.map((j) => [j.id, j]));
      expect(byId.has(failed)).toBe(false);
      expect(byId.get(indexRunId)).toMatchObject({
        kind: 'rag_index',
        workspaceId: ws.workspaceId,
        status: 'running',
        attempts: 1,
        maxAttempts: 3,
        leaseOwner: ts.server.deps.runs.workerId,
        notBefore: null,
        error: null,
      });
      expect(Date.parse(byId.get(indexRunId)?.leaseExpiresAt as string)).toBeGreaterThan(Date.now() - 60_000);
      expect(byId.get(retrying)).toMatchObject({
        kind: 'autonomous',
        status: 'running',
        attempts: 1,
        maxAttempts: 3,
        leaseOwner: null,
        error: 'upstream went away',
      });
      expect(Date.parse(byId.get(retrying)?.notBefore as string)).toBeGreaterThan(Date.now());

      const onlyFailed = json<{ jobs: JobView[] }>(
        await cli('jobs', 'list', '--status', 'failed', '--workspace', ws.workspaceId, '--json'),
      );
      expect(onlyFailed.jobs.map((j) => [j.id, j.error])).toEqual([
        [failed, 'Worker lost: the run lease expired; giving up after 3 attempts'],
      ]);
      const onlyIndex = json<{ jobs: JobView[] }>(
        await cli('jobs', 'list', '--kind', 'rag_index', '--workspace', ws.workspaceId, '--json'),
      );
      expect(onlyIndex.jobs.map((j) => j.id)).toEqual([indexRunId]);

      const human = await cliProcess('jobs', 'list', '--workspace', ws.workspaceId);
      expect(human.code, human.stderr).toBe(0);
      expect(human.stdout).toMatch(/^ID\s+KIND\s+WORKSPACE\s+STATUS\s+ATTEMPTS\s+LEASE OWNER/);
      expect(human.stdout).toContain(indexRunId);
      expect(human.stdout).toContain('1/3');
      expect(human.stdout).toContain('upstream went away');

      const bad = await cli('jobs', 'list', '--status', 'stuck');
      expect(bad.code).toBe(2);
    },
    SLOW,
  );

  it(
    'cancels a running rag_index: the worker stops, the document fails with the reason',
    async () => {
      const out = json<{ job: { id: string; kind: string; status: string; before: string } }>(
        await cli('jobs', 'cancel', indexRunId, '--json'),
      );
      expect(out.job).toEqual({
        id: indexRunId,
        kind: 'rag_index',
        workspaceId: ws.workspaceId,
        status: 'cancelled',
        before: 'running',
      });
      // The worker in the server notices, aborts its upstream call and writes run.cancelled last.
      const events = await waitFor(async () => {
        const rows = await em().execute<{ type: string }[]>(
          'select type from run_events where run_id = ? order by seq',
          [indexRunId],
        );
        return rows.at(-1)?.type === 'run.cancelled' && rows;
      }, 'run.cancelled');
      expect(events.filter((e) => e.type === 'run.cancelled')).toHaveLength(1);
      await waitFor(
        async () => fake.requests.filter((r) => r.path.endsWith('/embeddings')).every((r) => r.aborted),
        'the aborted calls',
      );
      const [run] = await em().execute<{ status: string; lease_owner: string | null }[]>(
        'select status, lease_owner from runs where id = ?',
        [indexRunId],
      );
      expect(run).toEqual({ status: 'cancelled', lease_owner: null });
      const [doc] = await em().execute<{ status: string; error: string; chunk_count: number }[]>(
        'select status, error, chunk_count from rag_documents where id = ?',
        [documentId],
      );
      expect(doc).toEqual({ status: 'failed', error: 'Cancelled by an operator', chunk_count: 0 });
      expect(await em().execute('select 1 from rag_chunks where document_id = ?', [documentId])).toEqual([]);
      const [file] = await em().execute<{ index_status: string }[]>(
        'select index_status from storage_files where id = ?',
        [fileId],
      );
      expect(file?.index_status).toBe('failed');
    },
    SLOW,
  );

  it(
    'cancels a job waiting for its retry at once; refuses one that ended or does not exist',
    async () => {
      const out = json<{ job: { status: string; before: string } }>(
        await cli('jobs', 'cancel', retrying, '--json'),
      );
      expect(out.job).toMatchObject({ status: 'cancelled', before: 'running' });
      const events = await em().execute<{ type: string }[]>('select type from run_events where run_id = ?', [
        retrying,
      ]);
      expect(events.map((e) => e.type)).toEqual(['run.cancelled']);

      const again = await cliProcess('jobs', 'cancel', indexRunId);
      expect(again.code).toBe(1);
      expect(again.stderr).toContain('error: Run is cancelled');
      const missing = await cli('jobs', 'cancel', randomUUID(), '--json');
      expect(missing.code).toBe(1);
      expect(JSON.parse(missing.stderr.trim().split('\n').at(-1) as string)).toMatchObject({
        code: 'JOB_NOT_FOUND',
      });
      expect(missing.stderr).toContain('Job not found');
    },
    SLOW,
  );
});
