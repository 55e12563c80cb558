import { createRequire } from 'node:module';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { MessageChannel, type Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { Piscina } from 'piscina';
import type { ServerDeps } from '../../context.js';
import type { Chunk } from './chunk.js';
import { type ChunkJob, documentBatches, ResumeMismatchError } from './document-chunks.js';
import type { ExtractTask, MainMessage, WorkerMessage } from './document-worker.js';
import { type InspectInput, inspectDocument } from './inspect.js';
import { ExtractionError, type LimitError, LimitError as LimitErrorClass, over } from './limits.js';

export interface DocumentPoolSettings {
  /** Worker threads; 0 = extraction on the calling thread (no isolation, no memory or time limit). */
  workers: number;
  /** Old-generation heap of each worker (`resourceLimits.maxOldGenerationSizeMb`). */
  memoryMb: number;
  /** Time a job may work, not counting the time it waits for the main thread. */
  timeoutMs: number;
  /** An idle worker exits after this long (the next job starts a new one). */
  idleMs?: number;
}

export interface ExtractJob extends ChunkJob {
  body: Readable;
  /** Aborting it terminates the job's worker; the generator then throws the signal's reason. */
  signal?: AbortSignal;
}

/**
 * The worker's script: the build's `document-worker.js` beside this chunk; from the TypeScript
 * sources (tests, `pnpm dev`) the `.ts` file, with tsx's loader given to the worker.
 */
function workerScript(): { filename: string; execArgv?: string[] } {
  if (!import.meta.url.endsWith('.ts')) {
    return { filename: fileURLToPath(new URL('./document-worker.js', import.meta.url)) };
  }
  const tsxDir = path.dirname(createRequire(import.meta.url).resolve('tsx/package.json'));
  return {
    filename: fileURLToPath(new URL('./document-worker.ts', import.meta.url)),
    execArgv: ['--import', pathToFileURL(path.join(tsxDir, 'dist/loader.mjs')).href],
  };
}

/**
 * The job's clock: it runs only while the worker has the work, i.e. while the main thread owes
 * it nothing (no batch being stored, no bytes being read). A job that waits for a slow
 * embedding upstream is not timed out for it; a worker stuck in a parser is.
 */
class WorkClock {
  private owed = 0;
  private started = false;
  private left: number;
  private since = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    ms: number,
    private readonly onTimeout: () => void,
  ) {
    this.left = ms;
  }
  start() {
    this.started = true;
    this.arm();
  }
  owe() {
    if (this.owed++ === 0) this.disarm();
  }
  paid() {
    if (--this.owed === 0) this.arm();
  }
  stop() {
    this.disarm();
    this.started = false;
  }
  private arm() {
    if (!this.started || this.owed > 0 || this.timer) return;
    this.since = performance.now();
    this.timer = setTimeout(this.onTimeout, Math.max(0, this.left));
  }
  private disarm() {
    if (!this.timer) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.left -= performance.now() - this.since;
  }
}

/**
 * The pool of threads that read untrusted documents (decision 0040): piscina, each worker
 * under a heap limit, each job under a time limit enforced by terminating its worker (piscina
 * does that when a running task's signal aborts), its output bounded by `DocumentLimits`. A
 * worker that dies is replaced by the next job; nothing else in the process notices.
 */
export class DocumentPool {
  private piscina: Piscina | undefined;
  private working = 0;

  constructor(
    readonly settings: DocumentPoolSettings,
    private readonly log: Logger,
  ) {}

  private pool(): Piscina {
    if (!this.piscina) {
      const script = workerScript();
      this.piscina = new Piscina({
        filename: script.filename,
        execArgv: script.execArgv,
        minThreads: 0,
        maxThreads: this.settings.workers,
        idleTimeout: this.settings.idleMs ?? 30_000,
        concurrentTasksPerWorker: 1,
        // Between tasks a worker waits on its port, not on Atomics.wait.
        atomics: 'disabled',
        resourceLimits: { maxOldGenerationSizeMb: this.settings.memoryMb },
      });
      // A worker that dies between tasks: piscina replaces it at the next task.
      this.piscina.on('error', (err: unknown) => this.log.warn({ err }, 'document worker failed'));
    }
    return this.piscina;
  }

  /** Jobs a worker has started and not finished. */
  get active(): number {
    return this.working;
  }

  /** The live worker threads (tests kill one to see the pool recover). */
  get threads(): Worker[] {
    return this.piscina ? [...this.piscina.threads] : [];
  }

  /**
   * The bound a document's first or last bytes already pass: its error, or undefined. The
   * checks of the first bytes run here (linear scans of at most 64 KB, under a millisecond): a
   * job queued behind a long extraction must not hold an upload's stream. A DOCX's central
   * directory (up to a megabyte, thousands of entries) is read in the pool.
   */
  async inspect(input: InspectInput): Promise<LimitError | undefined> {
    if (this.settings.workers === 0 || !input.tail) return inspectDocument(input);
    const copy = (b?: Uint8Array) => (b ? new Uint8Array(b) : undefined);
    const message = (await this.pool().run(
      { ...input, head: copy(input.head), tail: copy(input.tail) },
      { name: 'inspect' },
    )) as string | null;
    return message === null ? undefined : new LimitErrorClass(message);
  }

  /**
   * The chunks of a document in batches: extracted and chunked by a worker while the caller
   * stores the batches it has; asking for the next batch acknowledges the previous one, so the
   * worker is never more than a couple of batches ahead. Throws `ExtractionError` (a
   * `LimitError` for a bound, the memory or the time limit), `ResumeMismatchError`, the
   * object's own read error, or the signal's reason.
   */
  async *extract(job: ExtractJob): AsyncGenerator<Chunk[]> {
    const { body, signal, ...chunkJob } = job;
    if (this.settings.workers === 0) {
      for await (const batch of documentBatches(body, chunkJob)) {
        signal?.throwIfAborted();
        yield batch;
      }
      return;
    }
    const { port1: port, port2 } = new MessageChannel();
    const abort = new AbortController();
    let timedOut = false;
    const clock = new WorkClock(this.settings.timeoutMs, () => {
      timedOut = true;
      abort.abort(new Error('time limit'));
    });
    const onCallerAbort = () => abort.abort(signal?.reason);
    signal?.addEventListener('abort', onCallerAbort, { once: true });

    const batches: Chunk[][] = [];
    let end: { error?: unknown } | undefined;
    let wake: (() => void) | undefined;
    const finish = (error?: unknown) => {
      end ??= { error };
      wake?.();
    };
    let readError: unknown;
    let started = false;
    const reader = body[Symbol.asyncIterator]() as AsyncIterator<Buffer | Uint8Array | string>;
    const send = (m: MainMessage, transfer: ArrayBuffer[] = []) => {
      if (!end) port.postMessage(m, transfer);
    };

    port.on('message', (m: WorkerMessage) => {
      switch (m.t) {
        case 'start':
          started = true;
          this.working++;
          clock.start();
          break;
        case 'pull':
          clock.owe();
          reader.next().then(
            (r) => {
              clock.paid();
              if (r.done) return send({ t: 'end' });
              // A copy of its own (the stream's buffer may share its memory with others); a
              // stream of strings (`Readable.from(['…'])`) is sent as UTF-8.
              const bytes = typeof r.value === 'string' ? Buffer.from(r.value) : new Uint8Array(r.value);
              send({ t: 'data', bytes }, [bytes.buffer]);
            },
            (err) => {
              clock.paid();
              readError = err;
              send({ t: 'error', message: 'the object could not be read' });
            },
          );
          break;
        case 'chunks':
          clock.owe();
          batches.push(m.chunks);
          wake?.();
          break;
        case 'done':
          finish();
          break;
        case 'failed':
          finish(
            readError ??
              (m.reason === 'resume'
                ? new ResumeMismatchError()
                : m.reason === 'limit'
                  ? new LimitErrorClass(m.message)
                  : new ExtractionError(m.message)),
          );
          break;
      }
    });

    const task: ExtractTask = { ...chunkJob, port: port2 };
    const run = this.pool()
      .run(task, { transferList: [port2], signal: abort.signal })
      .then(
        () => undefined,
        (err: unknown) => {
          if (end) return;
          if (signal?.aborted) return finish(signal.reason ?? err);
          if (timedOut) return finish(over.time(this.settings.timeoutMs));
          if ((err as { code?: string })?.code === 'ERR_WORKER_OUT_OF_MEMORY') {
            return finish(over.memory(this.settings.memoryMb));
          }
          if (readError) return finish(readError);
          if (/worker exited/i.test(String((err as Error)?.message))) {
            this.log.warn({ err }, 'a document worker exited during its job');
            return finish(new ExtractionError('The worker extracting the document stopped before the end'));
          }
          finish(err);
        },
      );

    try {
      for (;;) {
        const batch = batches.shift();
        if (batch) {
          yield batch;
          send({ t: 'ack' });
          clock.paid();
          continue;
        }
        if (end) {
          if (end.error !== undefined) throw end.error;
          return;
        }
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
    } finally {
      if (started) this.working--;
      clock.stop();
      signal?.removeEventListener('abort', onCallerAbort);
      // Left early (the caller failed or stopped): the worker is terminated, not asked.
      if (!end) abort.abort(new Error('extraction abandoned'));
      end ??= {};
      port.close();
      body.destroy();
      await run;
    }
  }

  async close(): Promise<void> {
    const p = this.piscina;
    this.piscina = undefined;
    await p?.destroy();
  }
}

/** One pool per server (its database handle identifies it, as for the vector index). */
const pools = new WeakMap<object, DocumentPool>();

export function documentPool(deps: Pick<ServerDeps, 'db' | 'config' | 'log'>): DocumentPool {
  let pool = pools.get(deps.db);
  if (!pool) {
    pool = new DocumentPool(deps.config.documents.pool, deps.log);
    pools.set(deps.db, pool);
  }
  return pool;
}

/** Stops the server's pool (its workers are terminated): at shutdown, after the runs stopped. */
export async function closeDocumentPool(deps: Pick<ServerDeps, 'db'>): Promise<void> {
  const pool = pools.get(deps.db);
  pools.delete(deps.db);
  await pool?.close();
}
