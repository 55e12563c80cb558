import fsp from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { MessageChannel, type MessagePort, type Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { Piscina } from 'piscina';
import type { ServerDeps } from '../../context.js';
import type { Chunk } from './chunk.js';
import { type ChunkJob, documentBatches, ResumeMismatchError } from './document-chunks.js';
import { type SpoolFiles, SpoolReader, spoolDocument, spoolFiles, sweepSpools } from './document-spool.js';
import type { ExtractResult, ExtractTask, InspectTask, WorkerMessage } from './document-worker.js';
import { type Admission, FairQueue, type Ticket } from './fair-queue.js';
import { type InspectInput, inspectDocument } from './inspect.js';
import { ExtractionError, type LimitError, LimitError as LimitErrorClass, MIB, over } from './limits.js';

export interface DocumentPoolSettings {
  /** Worker threads; 0 = extraction on the calling thread (no isolation, no memory or time limit). */
  workers: number;
  /** Old-generation heap of each worker (`resourceLimits.maxOldGenerationSizeMb`). */
  memoryMb: number;
  /** Wall time a job may hold its worker; past it the worker is terminated. */
  timeoutMs: number;
  /** Jobs of one workspace in the pipeline at once (waiting, extracting, or being stored). */
  perWorkspace?: number;
  /** An idle worker exits after this long (the next job starts a new one). */
  idleMs?: number;
  /** Where the spool files are made (unlinked at once); the OS's temporary directory by default. */
  tmpDir?: string;
  /** The worker's script (tests: one that fails to start). */
  script?: { filename: string; execArgv?: string[] };
}

/** Jobs of one workspace in the pipeline at once, by default. */
export const DEFAULT_PER_WORKSPACE = 8;
/** Bytes of one document the pool spools (the upload bound, 100 MB). */
export const MAX_SPOOL_BYTES = 100 * MIB;

export interface ExtractJob extends ChunkJob {
  /** The workspace the document belongs to: its jobs share its fair turn and its cap. */
  workspaceId: string;
  body: Readable;
  /** Past the workspace's cap: wait for a place (default) or refuse (`WorkspaceQueueFullError`). */
  admission?: Admission;
  /** Aborting it terminates the job's worker; the generator then throws the signal's reason. */
  signal?: AbortSignal;
}

/**
 * A worker died before it took its job (it crashed while loading, or ran out of memory as it
 * started): not the document's fault. The job fails with it; a background indexing run is
 * retried under the run engine's rule.
 */
export class WorkerStartError extends ExtractionError {
  override name = 'WorkerStartError';
  constructor() {
    super('The document worker could not start');
  }
}

/**
 * The worker's script: the build's `document-worker.js` beside this chunk; from the TypeScript
 * sources (tests, `pnpm dev`) the `.ts` file, with tsx's loader given to the worker.
 */
export function workerScript(name = 'document-worker'): { filename: string; execArgv?: string[] } {
  if (!import.meta.url.endsWith('.ts')) {
    return { filename: fileURLToPath(new URL(`./${name}.js`, import.meta.url)) };
  }
  const tsxDir = path.dirname(createRequire(import.meta.url).resolve('tsx/package.json'));
  return {
    filename: fileURLToPath(new URL(`./${name}.ts`, import.meta.url)),
    execArgv: ['--import', pathToFileURL(path.join(tsxDir, 'dist/loader.mjs')).href],
  };
}

/** A task handed to piscina and not yet taken by a worker. */
interface Pending {
  started: boolean;
  /** Aborts the task (piscina drops it from its queue) as a start failure. */
  startFailed: () => void;
}

/**
 * The pool of threads that read untrusted documents (decision 0040): piscina, each worker
 * under a heap limit, each job under a time limit enforced by terminating its worker (piscina
 * does that when a running task's signal aborts), its output bounded by `DocumentLimits`. A
 * worker that dies is replaced by the next job; nothing else in the process notices.
 *
 * In front of piscina, a fair queue (`fair-queue.ts`): jobs take the workers in turns between
 * workspaces, at most `perWorkspace` of one workspace at once. A job holds a worker for CPU
 * work only: its document is spooled to a local file before it gets its turn, its chunks are
 * spooled to another that the caller reads, embeds and stores after the worker moved on.
 */
export class DocumentPool {
  private piscina: Piscina | undefined;
  private working = 0;
  private readonly queue: FairQueue;
  /** Tasks handed to piscina that no worker has taken yet, oldest first. */
  private readonly pending: Pending[] = [];
  /** Workers that finished starting (piscina's `workerCreate`). */
  private readonly ready = new WeakSet<object>();

  constructor(
    readonly settings: DocumentPoolSettings,
    private readonly log: Logger,
  ) {
    this.queue = new FairQueue(Math.max(1, settings.workers), settings.perWorkspace ?? DEFAULT_PER_WORKSPACE);
  }

  private swept = false;
  private tmpDir(): string {
    const dir = this.settings.tmpDir ?? os.tmpdir();
    if (!this.swept) {
      this.swept = true;
      void sweepSpools(dir);
    }
    return dir;
  }

  private pool(): Piscina {
    if (!this.piscina) {
      const script = this.settings.script ?? workerScript();
      const piscina = new Piscina({
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
      piscina.on('error', (err: unknown) => this.log.warn({ err }, 'document worker failed'));
      piscina.on('workerCreate', (w: object) => this.ready.add(w));
      // A worker that dies before it is ready leaves the task that made piscina start it in
      // piscina's queue, with no worker coming for it. Which waiting task that was is not
      // known: every task no worker has started fails (a run is retried, decision 0040).
      piscina.on('workerDestroy', (w: object) => {
        if (this.ready.has(w)) return;
        const waiting = this.pending.filter((p) => !p.started);
        if (waiting.length === 0) return;
        this.log.warn(
          { jobs: waiting.length },
          'a document worker died while starting; its waiting jobs fail',
        );
        for (const p of waiting) p.startFailed();
      });
      this.piscina = piscina;
    }
    return this.piscina;
  }

  /** Jobs a worker has started and not finished. */
  get active(): number {
    return this.working;
  }

  /** Jobs holding a worker's turn (started or about to). */
  get busy(): number {
    return this.queue.busy;
  }

  /** Jobs of a workspace in the pipeline (waiting, extracting, or being stored). */
  admitted(workspaceId: string): number {
    return this.queue.admitted(workspaceId);
  }

  /** The live worker threads (tests kill one to see the pool recover). */
  get threads(): Worker[] {
    return this.piscina ? [...this.piscina.threads] : [];
  }

  /**
   * Runs one task on a worker. `onMessage` gets the task's port messages; the first, `start`,
   * tells that a worker took it. A worker that dies while starting fails it with
   * `WorkerStartError`; aborting `abort` terminates a started task's worker.
   */
  private runTask<T>(
    name: 'default' | 'inspect',
    task: (port: MessagePort) => object,
    abort: AbortController,
    onMessage: (m: WorkerMessage) => void,
  ): { done: Promise<T>; port: MessagePort } {
    const { port1: port, port2 } = new MessageChannel();
    let startFailed = false;
    const entry: Pending = {
      started: false,
      startFailed: () => {
        startFailed = true;
        abort.abort(new WorkerStartError());
      },
    };
    this.pending.push(entry);
    const settle = () => {
      const i = this.pending.indexOf(entry);
      if (i >= 0) this.pending.splice(i, 1);
    };
    port.on('message', (m: WorkerMessage) => {
      if (m.t === 'start') {
        entry.started = true;
        settle();
      }
      onMessage(m);
    });
    const done = (
      this.pool().run(task(port2), { name, transferList: [port2], signal: abort.signal }) as Promise<T>
    ).then(
      (v) => {
        settle();
        return v;
      },
      (err: unknown) => {
        settle();
        throw startFailed ? new WorkerStartError() : err;
      },
    );
    return { done, port };
  }

  /**
   * The bound a document's first or last bytes already pass: its error, or undefined. The
   * checks of the first bytes run here (linear scans of at most 64 KB, under a millisecond): a
   * job queued behind a long extraction must not hold an upload's stream. A DOCX's central
   * directory (up to a megabyte, thousands of entries) is read in the pool, in the
   * workspace's turn.
   */
  async inspect(input: InspectInput & { workspaceId: string }): Promise<LimitError | undefined> {
    const { workspaceId, ...rest } = input;
    if (this.settings.workers === 0 || !rest.tail) return inspectDocument(rest);
    const copy = (b?: Uint8Array) => (b ? new Uint8Array(b) : undefined);
    const ticket = await this.queue.admit(workspaceId, 'wait');
    try {
      const giveBack = await ticket.turn();
      let port: MessagePort | undefined;
      try {
        const task = this.runTask<string | null>(
          'inspect',
          (p) => ({ ...rest, head: copy(rest.head), tail: copy(rest.tail), port: p }) satisfies InspectTask,
          new AbortController(),
          () => {},
        );
        port = task.port;
        const message = await task.done;
        return message === null ? undefined : new LimitErrorClass(message);
      } finally {
        port?.close();
        giveBack();
      }
    } finally {
      ticket.release();
    }
  }

  /**
   * The chunks of a document in batches. The document is spooled to a local file, then waits
   * for its workspace's turn at a worker, which extracts and chunks it into a second spool
   * file; the batches are read from there as the caller asks for them, and the worker is free
   * for the next job as soon as it is done, however slow the caller. Throws `ExtractionError`
   * (a `LimitError` for a bound, the memory or the time limit; `WorkerStartError`),
   * `WorkspaceQueueFullError`, `ResumeMismatchError`, the object's own read error, or the
   * signal's reason.
   */
  async *extract(job: ExtractJob): AsyncGenerator<Chunk[]> {
    const { body, signal, workspaceId, admission, ...chunkJob } = job;
    if (this.settings.workers === 0) {
      for await (const batch of documentBatches(body, chunkJob)) {
        signal?.throwIfAborted();
        yield batch;
      }
      return;
    }
    let ticket: Ticket | undefined;
    let files: SpoolFiles | undefined;
    let output: fsp.FileHandle | undefined;
    const abort = new AbortController();
    const onCallerAbort = () => abort.abort(signal?.reason);
    signal?.addEventListener('abort', onCallerAbort, { once: true });
    let run: Promise<unknown> | undefined;
    let giveBack: (() => void) | undefined;
    let port: MessagePort | undefined;
    let end: { error?: unknown } | undefined;
    try {
      signal?.throwIfAborted();
      ticket = await this.queue.admit(workspaceId, admission ?? 'wait', abort.signal);
      files = await spoolFiles(this.tmpDir());
      await spoolDocument(body, files.input, MAX_SPOOL_BYTES);
      output = await fsp.open(files.output, 'r');
      giveBack = await ticket.turn(abort.signal);

      let written = 0;
      let wake: (() => void) | undefined;
      const finish = (error?: unknown) => {
        end ??= { error };
        wake?.();
      };
      let timedOut = false;
      let timer: NodeJS.Timeout | undefined;
      let started = false;
      const { input, output: out } = files;
      const task = this.runTask<ExtractResult>(
        'default',
        (p) => ({ ...chunkJob, input, output: out, port: p }) satisfies ExtractTask,
        abort,
        (m) => {
          switch (m.t) {
            case 'start':
              started = true;
              this.working++;
              timer = setTimeout(() => {
                timedOut = true;
                abort.abort(new Error('time limit'));
              }, this.settings.timeoutMs);
              break;
            case 'batch':
              written = Math.max(written, m.end);
              wake?.();
              break;
          }
        },
      );
      port = task.port;
      run = task.done
        .then(
          (r) => {
            written = Math.max(written, r.end);
            if (r.ok) return finish();
            finish(
              r.reason === 'resume'
                ? new ResumeMismatchError()
                : r.reason === 'limit'
                  ? new LimitErrorClass(r.message)
                  : new ExtractionError(r.message),
            );
          },
          (err: unknown) => {
            if (end) return;
            if (signal?.aborted) return finish(signal.reason ?? err);
            if (err instanceof WorkerStartError) return finish(err);
            if (timedOut) return finish(over.time(this.settings.timeoutMs));
            if ((err as { code?: string })?.code === 'ERR_WORKER_OUT_OF_MEMORY') {
              return finish(over.memory(this.settings.memoryMb));
            }
            if (/worker exited|terminat/i.test(String((err as Error)?.message))) {
              this.log.warn({ err }, 'a document worker exited during its job');
              return finish(new ExtractionError('The worker extracting the document stopped before the end'));
            }
            finish(err);
          },
        )
        .finally(() => {
          clearTimeout(timer);
          if (started) this.working--;
          started = false;
          giveBack?.();
        });

      const reader = new SpoolReader(output);
      for (;;) {
        if (end?.error !== undefined) throw end.error;
        if (reader.hasMore(written)) {
          const batch = await reader.next();
          signal?.throwIfAborted();
          yield batch;
          continue;
        }
        if (end) return;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
    } finally {
      signal?.removeEventListener('abort', onCallerAbort);
      // Left early (the caller failed or stopped): a worker still on it is terminated, not asked.
      if (run && !end) abort.abort(new Error('extraction abandoned'));
      end ??= {};
      port?.close();
      body.destroy();
      await run;
      if (!run) giveBack?.();
      await output?.close();
      await files?.remove();
      ticket?.release();
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
    pool = new DocumentPool(
      { ...deps.config.documents.pool, tmpDir: path.join(deps.config.dataDir, 'tmp') },
      deps.log,
    );
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
