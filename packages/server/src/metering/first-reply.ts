/**
 * The first reply of a model on an endpoint, as a process sizes its reservations (decision
 * 0041). Until a process has seen a reply of a model on an endpoint, it knows nothing of how
 * long the replies are, and the configured default (`METERING_DEFAULT_OUTPUT_TOKENS`, 512)
 * may be far off: a first burst on a fresh `/chat` quota reserved 512 output tokens for
 * replies of 16 and served a twentieth of what the quota paid for.
 *
 * So the first request of a key goes ahead alone (the probe, reserving the default), and the
 * requests that come while it is in flight wait for its reply to be recorded (at most
 * `waitMs`), then reserve from what it taught the estimator. One probe at a time per key; a
 * probe that ends without a reply (refused, failed) lets the waiters go and the next request
 * probes. In memory, per process, like the estimator.
 */
export interface FirstReplyTicket {
  /** This request is the probe: call `done()` once its usage is recorded (or it ended without). */
  readonly probe: boolean;
  /** Lets the waiters go (the probe's); a no-op for the others. Idempotent. */
  done(): void;
}

const PASS: FirstReplyTicket = { probe: false, done() {} };

export class FirstReplyGate {
  /** Keys with a probe in flight, and the requests waiting for it. */
  private readonly inFlight = new Map<string, Set<() => void>>();

  constructor(
    /** Whether a reply of `key` was seen already. */
    private readonly seen: (key: string) => boolean,
    private readonly waitMs: number,
  ) {}

  /**
   * Resolves when the request may size its reservation: at once when a reply of `key` was
   * seen (or waiting is off), as the probe when none is in flight, else once the probe's
   * reply is recorded or `waitMs` passed.
   */
  enter(key: string): FirstReplyTicket | Promise<FirstReplyTicket> {
    // Synchronous once a reply was seen: the hot path does not even take a microtask.
    if (this.waitMs <= 0 || this.seen(key)) return PASS;
    const waiters = this.inFlight.get(key);
    if (!waiters) return this.probe(key);
    return new Promise<FirstReplyTicket>((resolve) => {
      const timer = setTimeout(() => {
        waiters.delete(wake);
        resolve(PASS);
      }, this.waitMs);
      timer.unref?.();
      const wake = () => {
        clearTimeout(timer);
        resolve(PASS);
      };
      waiters.add(wake);
    });
  }

  private probe(key: string): FirstReplyTicket {
    const waiters = new Set<() => void>();
    this.inFlight.set(key, waiters);
    let open = true;
    return {
      probe: true,
      done: () => {
        if (!open) return;
        open = false;
        if (this.inFlight.get(key) === waiters) this.inFlight.delete(key);
        for (const wake of waiters) wake();
        waiters.clear();
      },
    };
  }
}
