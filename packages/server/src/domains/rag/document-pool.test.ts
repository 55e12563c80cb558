import { Readable } from 'node:stream';
import { manyPagesPdf } from '@ai-suite/testkit';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { DocumentPool } from './document-pool.js';
import type { DocumentKind } from './extract.js';
import { DEFAULT_LIMITS, type DocumentLimits, ExtractionError, LimitError } from './limits.js';

/** The extraction pool on its own (decision 0040): limits enforced by the pool, not asked of the job. */

const log = pino({ level: 'silent' });
const pools: DocumentPool[] = [];
const newPool = (settings: Partial<DocumentPool['settings']> = {}) => {
  const p = new DocumentPool({ workers: 1, memoryMb: 128, timeoutMs: 60_000, ...settings }, log);
  pools.push(p);
  return p;
};
afterAll(async () => {
  await Promise.all(pools.map((p) => p.close()));
});

async function drain(
  pool: DocumentPool,
  kind: DocumentKind,
  body: Readable,
  limits: Partial<DocumentLimits> = {},
  each?: (n: number) => Promise<void>,
  workspaceId = 'ws-a',
) {
  let n = 0;
  for await (const batch of pool.extract({
    workspaceId,
    kind,
    body,
    limits: { ...DEFAULT_LIMITS, ...limits },
    batch: 64,
  })) {
    n += batch.length;
    await each?.(n);
  }
  return n;
}

const prose = (sentences: number) =>
  Buffer.from(Array.from({ length: sentences }, (_, i) => `Sentence ${i} is about the harbour. `).join(''));

describe('the document pool', () => {
  it('extracts in a worker thread and hands batches back in order', async () => {
    const pool = newPool();
    const contents: string[] = [];
    for await (const batch of pool.extract({
      workspaceId: 'ws-a',
      kind: 'text',
      body: Readable.from([prose(3000)]),
      limits: DEFAULT_LIMITS,
      batch: 64,
    })) {
      contents.push(...batch.map((c) => c.content));
    }
    expect(pool.threads.length).toBe(1);
    expect(contents.join(' ')).toContain('Sentence 2999 is about the harbour.');
  });

  it('holds a worker for CPU work only: a slow caller stores its batches after the worker moved on', async () => {
    const pool = newPool();
    const gen = pool.extract({
      workspaceId: 'ws-a',
      kind: 'text',
      body: Readable.from([prose(20_000)]),
      limits: DEFAULT_LIMITS,
      batch: 64,
    });
    // The caller takes one batch and stores nothing more for now (a slow embedding upstream).
    const first = await gen.next();
    expect(first.value).toHaveLength(64);
    // The worker finished the whole document meanwhile: its turn is over.
    await expect.poll(() => pool.busy, { timeout: 60_000 }).toBe(0);
    expect(pool.active).toBe(0);
    // Another workspace's document is extracted while the first caller is still storing.
    await expect(
      drain(pool, 'text', Readable.from([prose(100)]), {}, undefined, 'ws-b'),
    ).resolves.toBeGreaterThan(0);
    let n = 64;
    for await (const batch of gen) n += batch.length;
    expect(n).toBe(740);
  });

  it('terminates a job over its time; the next job gets a new worker', async () => {
    const pool = newPool({ timeoutMs: 300 });
    const err = await drain(pool, 'pdf', Readable.from([manyPagesPdf(100_000)]), {
      maxPdfPages: 1_000_000,
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(LimitError);
    expect((err as Error).message).toBe('Extracting the document took longer than 0.3 s; the limit is 0.3 s');
    expect(pool.threads).toHaveLength(0);
    await expect(drain(pool, 'text', Readable.from([prose(100)]))).resolves.toBeGreaterThan(0);
  }, 120_000);

  it('fails a job over its memory with the limit named; the pool goes on', async () => {
    // A time limit out of reach: the memory limit is what stops this job, however loaded the host.
    const pool = newPool({ memoryMb: 64, timeoutMs: 1_800_000 });
    // 3 million small objects: several hundred MB of heap once parsed.
    const json = Buffer.from(`[${Array.from({ length: 3_000_000 }, () => '{"a":1}').join(',')}]`);
    const err = await drain(pool, 'json', Readable.from([json])).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(LimitError);
    expect((err as Error).message).toBe(
      'Extracting the document needed more than 64 MB of memory; the limit is 64 MB',
    );
    await expect(drain(pool, 'json', Readable.from([Buffer.from('{"ok":true}')]))).resolves.toBe(1);
  }, 120_000);

  it('a worker killed mid-job: that job fails cleanly, the next one runs on a new worker', async () => {
    const pool = newPool();
    let pulled = false;
    const pdf = manyPagesPdf(100_000);
    const body = Readable.from(
      (function* () {
        pulled = true;
        yield pdf;
      })(),
    );
    const job = drain(pool, 'pdf', body, { maxPdfPages: 1_000_000 });
    // Mid-job: the worker has read the document and is going through its pages.
    await expect.poll(() => pulled && pool.active === 1, { timeout: 60_000 }).toBe(true);
    await new Promise((r) => setTimeout(r, 500));
    const [worker] = pool.threads;
    await worker?.terminate();
    const err = await job.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ExtractionError);
    expect((err as Error).message).toBe('The worker extracting the document stopped before the end');
    await expect(drain(pool, 'text', Readable.from([prose(100)]))).resolves.toBeGreaterThan(0);
    expect(pool.threads[0]).not.toBe(worker);
  }, 120_000);

  it('a caller that stops early (its storage failed): the worker is terminated, not left running', async () => {
    const pool = newPool();
    const gen = pool.extract({
      workspaceId: 'ws-a',
      kind: 'text',
      body: Readable.from([prose(50_000)]),
      limits: DEFAULT_LIMITS,
      batch: 64,
    });
    await gen.next();
    await gen.return(undefined);
    expect(pool.threads).toHaveLength(0);
  });

  it('a stream of strings is read as UTF-8', async () => {
    const pool = newPool();
    await expect(drain(pool, 'text', Readable.from(['Ärger über Straße. ', 'Zweiter Satz.']))).resolves.toBe(
      1,
    );
  });

  it('an object that cannot be read: its read error, not the document’s', async () => {
    const pool = newPool();
    const body = new Readable({
      read() {
        this.destroy(new Error('connection reset by the object store'));
      },
    });
    await expect(drain(pool, 'csv', body)).rejects.toThrow('connection reset by the object store');
  });
});
