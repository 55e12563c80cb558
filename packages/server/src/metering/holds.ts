import type { SqlExecutor } from '../db/sql.js';

/**
 * What a generation has used so far, as its hold row keeps it for a settlement after a crash
 * (`PgMetering.settleExpired` charges `usedMicros` and records the tokens).
 */
export interface HoldProgress {
  usedMicros: number;
  inputTokens: number;
  outputTokens: number;
}

/** How often the progress of the holds in flight is written (at most; the lease's third if shorter). */
export const HOLD_PROGRESS_MS = 1000;

/**
 * The holds this process has in flight, kept alive and their progress marked: every
 * `HOLD_PROGRESS_MS` (or every third of the lease, if shorter) ONE statement moves on the
 * `expires_at` of every live hold by one lease and writes, for each hold whose generation
 * streamed more since the last mark, what it has used so far (`used_micros`, `input_tokens`,
 * `output_tokens`). A process that dies stops doing so; the run engine's sweep settles its
 * holds once they expire, charging the last mark: what a killed process had streamed, less at
 * most one interval of it.
 *
 * The statement skips hold rows locked by a top-up or a settlement of the moment (`SKIP
 * LOCKED`): it never waits for them, so it cannot deadlock with them; a skipped hold is marked
 * at the next interval (its top-up marked it anyway).
 */
export class HoldLeases {
  private readonly live = new Map<string, () => HoldProgress>();
  /** The last progress written per hold (a mark is written only when it changed). */
  private readonly marked = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;

  constructor(
    private readonly db: () => SqlExecutor,
    private readonly leaseMs: number,
  ) {}

  /** Keeps hold `id` alive; `progress` (if given) tells what its generation has used so far. */
  add(id: string, progress?: () => HoldProgress): void {
    this.live.set(id, progress ?? (() => ({ usedMicros: -1, inputTokens: -1, outputTokens: -1 })));
    if (!this.timer) {
      const every = Math.max(200, Math.min(HOLD_PROGRESS_MS, Math.floor(this.leaseMs / 3)));
      this.timer = setInterval(() => void this.beat(), every);
      this.timer.unref();
    }
  }

  delete(id: string): void {
    this.live.delete(id);
    this.marked.delete(id);
    if (this.live.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** Whether hold `id` is kept alive by this process. */
  has(id: string): boolean {
    return this.live.has(id);
  }

  /** One heartbeat now (the timer's; tests call it to mark progress without waiting). */
  beat(): Promise<void> {
    // One beat at a time: a slow statement is not piled on.
    this.beating ??= this.beatOnce().finally(() => {
      this.beating = undefined;
    });
    return this.beating;
  }

  private async beatOnce(): Promise<void> {
    if (this.live.size === 0) return;
    const ids: string[] = [];
    const used: number[] = [];
    const input: number[] = [];
    const output: number[] = [];
    for (const [id, progress] of this.live) {
      let p: HoldProgress;
      try {
        p = progress();
      } catch {
        p = { usedMicros: -1, inputTokens: -1, outputTokens: -1 };
      }
      const fresh = p.usedMicros >= 0 && this.marked.get(id) !== p.usedMicros;
      ids.push(id);
      used.push(fresh ? Math.round(p.usedMicros) : -1);
      input.push(fresh ? Math.round(p.inputTokens) : -1);
      output.push(fresh ? Math.round(p.outputTokens) : -1);
    }
    try {
      // A mark never lowers what a top-up noted (`greatest`); -1: no new mark for that hold.
      const rows = await this.db().execute<{ id: string }[]>(
        `with x as (
           select * from unnest(?::uuid[], ?::bigint[], ?::bigint[], ?::bigint[]) as x(id, used, inp, outp)
         ), l as (
           select h.id from credit_holds h where h.id in (select id from x) order by h.id for update skip locked
         )
         update credit_holds h set expires_at = now() + (?::text || ' milliseconds')::interval,
                used_micros = case when x.used >= 0 then greatest(h.used_micros, x.used) else h.used_micros end,
                input_tokens = case when x.used >= 0 then x.inp else h.input_tokens end,
                output_tokens = case when x.used >= 0 then greatest(h.output_tokens, x.outp) else h.output_tokens end
           from x where h.id = x.id and h.id in (select id from l)
         returning h.id`,
        [
          `{${ids.join(',')}}`,
          `{${used.join(',')}}`,
          `{${input.join(',')}}`,
          `{${output.join(',')}}`,
          this.leaseMs,
        ],
      );
      const written = new Set(rows.map((r) => r.id));
      for (let i = 0; i < ids.length; i++) {
        const id = ids[i] as string;
        const u = used[i] as number;
        if (u >= 0 && written.has(id) && this.live.has(id)) this.marked.set(id, u);
      }
    } catch {
      // The next beat tries again (a lease is three beats at least).
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
