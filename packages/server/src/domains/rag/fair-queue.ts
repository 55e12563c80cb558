/**
 * Fair scheduling of the document pool between workspaces (decision 0040, docs/rag.md
 * "Fairness"). Start-time fair queuing over `slots` (the pool's workers): each job gets a
 * start tag, `max(virtual time, its workspace's last finish tag)`; a free slot takes the
 * queued job with the smallest tag (the oldest on a tie), and the virtual time becomes that
 * tag. A workspace with many jobs queued gets one slot turn per turn of every other waiting
 * workspace: a job of a workspace with nothing queued is taken before the second job of one
 * that has jobs waiting, i.e. it waits for at most the jobs already running.
 *
 * In front of the queue, a cap on the jobs of one workspace in the pipeline (admitted and not
 * yet released): `admit` waits for a place (`'wait'`, back-pressure) or refuses
 * (`'refuse'`, `WorkspaceQueueFullError`).
 */

import { ExtractionError } from './limits.js';

export type Admission = 'wait' | 'refuse';

/** A workspace already has as many documents in the pipeline as the cap allows. */
export class WorkspaceQueueFullError extends ExtractionError {
  override name = 'WorkspaceQueueFullError';
  constructor(readonly cap: number) {
    super(
      `The workspace already has ${cap} documents being processed; the limit is ${cap} at a time, try again when one is done`,
    );
  }
}

interface Waiter {
  tag: number;
  seq: number;
  start: () => void;
}

interface WorkspaceState {
  /** Admitted and not released. */
  admitted: number;
  /** Admissions waiting for a place (mode `'wait'`), oldest first. */
  admissions: (() => void)[];
  /** Jobs waiting for a slot, oldest (smallest tag) first. */
  queued: Waiter[];
  /** The finish tag of its last job given a tag. */
  lastFinish: number;
}

/** A job's place in the pipeline: `turn()` for a slot, `release()` once when it is done. */
export interface Ticket {
  /** Waits for a slot; the returned function gives it back (once). Rejects if the signal aborts. */
  turn(signal?: AbortSignal): Promise<() => void>;
  release(): void;
}

export class FairQueue {
  private readonly workspaces = new Map<string, WorkspaceState>();
  private running = 0;
  private virtual = 0;
  private seq = 0;

  constructor(
    private readonly slots: number,
    readonly cap: number,
  ) {}

  /** Jobs holding a slot. */
  get busy(): number {
    return this.running;
  }

  /** Jobs of a workspace admitted and not released (queued, running, or storing their output). */
  admitted(workspaceId: string): number {
    return this.workspaces.get(workspaceId)?.admitted ?? 0;
  }

  private state(workspaceId: string): WorkspaceState {
    let s = this.workspaces.get(workspaceId);
    if (!s) {
      s = { admitted: 0, admissions: [], queued: [], lastFinish: 0 };
      this.workspaces.set(workspaceId, s);
    }
    return s;
  }

  /** A place in the pipeline for one job of `workspaceId` (see the class). */
  async admit(workspaceId: string, mode: Admission, signal?: AbortSignal): Promise<Ticket> {
    const s = this.state(workspaceId);
    if (s.admitted >= this.cap) {
      if (mode === 'refuse') {
        this.forget(workspaceId, s);
        throw new WorkspaceQueueFullError(this.cap);
      }
      await new Promise<void>((resolve, reject) => {
        const go = () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        const onAbort = () => {
          s.admissions.splice(s.admissions.indexOf(go), 1);
          this.forget(workspaceId, s);
          reject(signal?.reason);
        };
        if (signal?.aborted) return reject(signal.reason);
        s.admissions.push(go);
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    }
    s.admitted++;
    let released = false;
    return {
      turn: (sig) => this.turn(s, sig),
      release: () => {
        if (released) return;
        released = true;
        s.admitted--;
        const next = s.admissions.shift();
        if (next) next();
        else this.forget(workspaceId, s);
      },
    };
  }

  private forget(workspaceId: string, s: WorkspaceState) {
    if (s.admitted === 0 && s.admissions.length === 0 && s.queued.length === 0) {
      this.workspaces.delete(workspaceId);
    }
  }

  private turn(s: WorkspaceState, signal?: AbortSignal): Promise<() => void> {
    return new Promise<() => void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const tag = Math.max(this.virtual, s.lastFinish);
      s.lastFinish = tag + 1;
      const onAbort = () => {
        const i = s.queued.indexOf(waiter);
        if (i >= 0) s.queued.splice(i, 1);
        reject(signal?.reason);
      };
      const waiter: Waiter = {
        tag,
        seq: this.seq++,
        start: () => {
          signal?.removeEventListener('abort', onAbort);
          let given = false;
          resolve(() => {
            if (given) return;
            given = true;
            this.running--;
            this.dispatch();
          });
        },
      };
      s.queued.push(waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.dispatch();
    });
  }

  private dispatch(): void {
    while (this.running < this.slots) {
      let best: { s: WorkspaceState; w: Waiter } | undefined;
      for (const s of this.workspaces.values()) {
        const w = s.queued[0];
        if (w && (!best || w.tag < best.w.tag || (w.tag === best.w.tag && w.seq < best.w.seq))) {
          best = { s, w };
        }
      }
      if (!best) return;
      best.s.queued.shift();
      this.virtual = Math.max(this.virtual, best.w.tag);
      this.running++;
      best.w.start();
    }
  }
}
