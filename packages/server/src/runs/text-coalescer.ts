/**
 * Default window of a reply's streamed text (agent deltas, app chat tokens): a reply streamed a
 * token every few milliseconds makes a few events, not one per token.
 */
export const DEFAULT_COALESCE_MS = 20;

/**
 * A window setting (`AGENT_STREAM_COALESCE_MS`, `APP_CHAT_STREAM_COALESCE_MS`,
 * `CHAT_STREAM_COALESCE_MS`): ms ≥ 0, else
 * (unset, blank, not a number, negative) the default.
 */
export function coalesceWindowMs(value: string | undefined): number {
  const n = value === undefined || value.trim() === '' ? Number.NaN : Number(value);
  return Number.isFinite(n) && n >= 0 ? n : DEFAULT_COALESCE_MS;
}

/**
 * Merges streamed text into fewer, larger pieces (docs/run-engine.md, "Coalesced deltas"):
 * a piece that comes when nothing went out for `windowMs` goes out at once (so the first text
 * of a reply is never held back); later pieces gather and go out together when the window
 * ends, or at `flush`. What goes out, concatenated, is exactly what came in, in order. With
 * `windowMs` 0 every piece goes out as it comes.
 *
 * `out` is called synchronously (by `push`, `flush` or the window's timer), so its effects keep
 * the order of the calls even when the promise it returns settles later; a failure of a call
 * made by the timer is thrown by the next `push` or `flush`.
 */
export class TextCoalescer {
  private pending = '';
  private timer: NodeJS.Timeout | undefined;
  private lastOut = Number.NEGATIVE_INFINITY;
  private failed = false;
  private failure: unknown;

  constructor(
    private readonly windowMs: number,
    private readonly out: (text: string) => Promise<unknown>,
  ) {}

  /** Hands `text` on now, or keeps it for the end of the window. */
  async push(text: string): Promise<void> {
    this.rethrow();
    if (text === '') return;
    if (this.windowMs <= 0) {
      await this.out(text);
      return;
    }
    this.pending += text;
    if (this.timer) return;
    const wait = this.lastOut + this.windowMs - performance.now();
    if (wait <= 0) {
      await this.emit();
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.emit().catch((err: unknown) => {
        if (this.failed) return;
        this.failed = true;
        this.failure = err;
      });
    }, wait);
  }

  /** Hands on what waits, now (the stream ended, or something else is about to go out). */
  async flush(): Promise<void> {
    this.cancelTimer();
    this.rethrow();
    if (this.pending !== '') await this.emit();
  }

  /** Drops what waits and stops the window's timer. */
  discard(): void {
    this.cancelTimer();
    this.pending = '';
  }

  private emit(): Promise<unknown> {
    const text = this.pending;
    this.pending = '';
    this.lastOut = performance.now();
    return this.out(text);
  }

  private cancelTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private rethrow(): void {
    if (!this.failed) return;
    this.failed = false;
    const err = this.failure;
    this.failure = undefined;
    this.discard();
    throw err;
  }
}

/**
 * `TextCoalescer`'s window for a writer that is synchronous (`/chat` and the OpenAI-compatible
 * stream write straight to the socket): no promise per piece. A piece that comes when nothing
 * went out for `windowMs` goes out at once (a reply's first text is never held back); later
 * pieces gather until the window ends. `take` hands what waits to the caller, which sends it with
 * whatever ends the stream (one write for the last text and the end). With `windowMs` 0 every
 * piece goes out as it comes.
 */
export class TextWindow {
  private pending = '';
  private timer: NodeJS.Timeout | undefined;
  private lastOut = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly windowMs: number,
    private readonly out: (text: string) => void,
  ) {}

  push(text: string): void {
    if (text === '') return;
    if (this.timer) {
      this.pending += text;
      return;
    }
    const now = performance.now();
    const wait = this.lastOut + this.windowMs - now;
    if (wait <= 0) {
      this.lastOut = now;
      this.out(text);
      return;
    }
    this.pending = text;
    this.timer = setTimeout(this.onWindowEnd, wait);
  }

  /** What waits, taken out (the window's timer stopped): `''` when nothing does. */
  take(): string {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const text = this.pending;
    this.pending = '';
    return text;
  }

  private readonly onWindowEnd = (): void => {
    this.timer = undefined;
    const text = this.pending;
    this.pending = '';
    this.lastOut = performance.now();
    if (text !== '') this.out(text);
  };
}
