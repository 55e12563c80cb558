import type { ServerDeps } from '../../context.js';
import { fireNextDueTick } from './fire.js';

const intEnv = (v: string | undefined, d: number) => {
  const n = v === undefined || v.trim() === '' ? Number.NaN : Number(v);
  return Number.isFinite(n) && n >= 0 ? n : d;
};

/** Ticks fired in one pass at most, before the ticker yields to its next pass. */
const PASS_LIMIT = 100;

/**
 * The schedule ticker of this process: every `SCHEDULE_POLL_INTERVAL_MS` (default 1000; 0
 * turns it off on this process) it fires the due ticks of every workspace's schedules. Any
 * number of processes may run it: each tick is claimed through the database (fire.ts,
 * decision 0045), so a tick makes one run whichever process fires it.
 */
export class ScheduleTicker {
  private timer: NodeJS.Timeout | undefined;
  private pass: Promise<void> | undefined;
  private stopped = false;
  readonly pollMs: number;

  constructor(private readonly deps: ServerDeps) {
    this.pollMs = intEnv(deps.config.env.SCHEDULE_POLL_INTERVAL_MS, 1000);
  }

  start(): void {
    if (this.pollMs === 0 || this.stopped) return;
    this.schedule();
  }

  private schedule() {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.pass = this.runPass().then(
        () => undefined,
        () => undefined,
      );
      void this.pass.finally(() => {
        this.pass = undefined;
        this.schedule();
      });
    }, this.pollMs);
    this.timer.unref();
  }

  /** Fires every due tick free for this process (up to `PASS_LIMIT`). */
  async runPass(): Promise<number> {
    let fired = 0;
    let wake = false;
    try {
      while (!this.stopped && fired < PASS_LIMIT) {
        const r = await fireNextDueTick(this.deps);
        if (!r.claimed) break;
        fired++;
        wake ||= r.runCreated;
      }
    } catch (err) {
      this.deps.log.warn({ err }, 'schedule ticker pass failed; retrying at the next pass');
    }
    if (wake) await this.deps.runs.bus.publish({ t: 'wake' }).catch(() => undefined);
    return fired;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.pass;
  }
}
