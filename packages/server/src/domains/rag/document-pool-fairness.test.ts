import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { manyPagesPdf } from '@ai-suite/testkit';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { DocumentPool, WorkerStartError, workerScript } from './document-pool.js';
import type { DocumentKind } from './extract.js';
import { WorkspaceQueueFullError } from './fair-queue.js';
import { DEFAULT_LIMITS } from './limits.js';

/**
 * The pool between workspaces (decision 0040, docs/rag.md "Fairness"): one worker, one
 * workspace's queue of large documents, another's small one; and workers that die as they
 * start.
 */

const log = pino({ level: 'silent' });
const pools: DocumentPool[] = [];
const newPool = (settings: Partial<DocumentPool['settings']> = {}) => {
  const p = new DocumentPool({ workers: 1, memoryMb: 256, timeoutMs: 120_000, ...settings }, log);
  pools.push(p);
  return p;
};
const crashes = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-crash-')), 'count');
process.env.DOCUMENT_WORKER_CRASHES = crashes;
afterAll(async () => {
  await Promise.all(pools.map((p) => p.close()));
  fs.rmSync(path.dirname(crashes), { recursive: true, force: true });
});

async function drain(pool: DocumentPool, workspaceId: string, kind: DocumentKind, bytes: Buffer) {
  let n = 0;
  for await (const batch of pool.extract({
    workspaceId,
    kind,
    body: Readable.from([bytes]),
    limits: DEFAULT_LIMITS,
    batch: 64,
  })) {
    n += batch.length;
  }
  return n;
}

const note = Buffer.from('# Tides\n\nThe tide turns at six. The boats go out at seven.\n');

describe('fair turns between workspaces', () => {
  it('B’s small document is extracted after at most one of A’s large ones', async () => {
    const pool = newPool();
    const done: string[] = [];
    // A: four PDFs of 400 empty pages each, within the page bound (2000) but seconds of pdf.js.
    const pdf = manyPagesPdf(400);
    const jobs = [1, 2, 3, 4].map((i) => drain(pool, 'ws-a', 'pdf', pdf).then(() => done.push(`a${i}`)));
    // B arrives behind all of them.
    jobs.push(drain(pool, 'ws-b', 'text', note).then(() => done.push('b')));
    await Promise.all(jobs);
    expect(done).toHaveLength(5);
    expect(done.indexOf('b')).toBeLessThanOrEqual(1);
    // A's own jobs reach the queue when their spool files are written, in any order under load.
    expect(done.filter((d) => d !== 'b').sort()).toEqual(['a1', 'a2', 'a3', 'a4']);
  }, 300_000);

  it('a workspace past its cap: a refused job fails at once, another workspace goes on', async () => {
    const pool = newPool({ perWorkspace: 2 });
    const pdf = manyPagesPdf(200);
    const held = [drain(pool, 'ws-a', 'pdf', pdf), drain(pool, 'ws-a', 'pdf', pdf)];
    await expect.poll(() => pool.admitted('ws-a'), { timeout: 60_000 }).toBe(2);
    const refused = pool.extract({
      workspaceId: 'ws-a',
      admission: 'refuse',
      kind: 'text',
      body: Readable.from([note]),
      limits: DEFAULT_LIMITS,
      batch: 64,
    });
    await expect(refused.next()).rejects.toBeInstanceOf(WorkspaceQueueFullError);
    await expect(drain(pool, 'ws-b', 'text', note)).resolves.toBe(1);
    await Promise.all(held);
    expect(pool.admitted('ws-a')).toBe(0);
  }, 300_000);
});

describe('a worker that dies as it starts', () => {
  it('fails its job with the reason; the pool keeps serving on a new worker', async () => {
    const pool = newPool({ script: workerScript('crashing-worker.fixture') });
    fs.writeFileSync(crashes, '1');
    const err = await drain(pool, 'ws-a', 'text', note).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerStartError);
    expect((err as Error).message).toBe('The document worker could not start');
    expect(pool.busy).toBe(0);
    await expect(drain(pool, 'ws-a', 'text', note)).resolves.toBe(1);
    expect(fs.readFileSync(crashes, 'utf8')).toBe('0');
  }, 300_000);

  it('out of memory at spawn: every job fails cleanly, none waits forever', async () => {
    // A heap too small to load the extractors: each worker dies before it is ready.
    const pool = newPool({ memoryMb: 2 });
    const results = await Promise.all([
      drain(pool, 'ws-a', 'text', note).catch((e: unknown) => e),
      drain(pool, 'ws-b', 'text', note).catch((e: unknown) => e),
    ]);
    for (const r of results) expect(r).toBeInstanceOf(WorkerStartError);
    expect(pool.busy).toBe(0);
    expect(pool.threads).toHaveLength(0);
  }, 300_000);
});
