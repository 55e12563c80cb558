/**
 * Waits until every transaction that committed before the call is on disk, for commits made
 * with `synchronous_commit` off (decision 0032): it commits a small write transaction
 * synchronously (`run`, `COMMIT_BARRIER_SQL`: one that writes WAL before its commit record, or
 * PostgreSQL would commit it asynchronously too); its commit record comes after theirs in the
 * WAL, and PostgreSQL flushes the WAL up to it before answering. A commit made that way
 * releases its row locks at once instead of holding them through the flush, and the caller
 * still knows when it is durable.
 *
 * Group commit: callers that ask while a barrier is on its way share the next one (a barrier
 * sent before a caller's commit may not cover it), so at most one is in flight and one waits.
 */
export class CommitBarrier {
  private inflight: Promise<void> | undefined;
  private next: Promise<void> | undefined;
  /** Barriers sent so far. */
  count = 0;

  constructor(private readonly run: () => Promise<unknown>) {}

  wait(): Promise<void> {
    if (!this.inflight) {
      this.inflight = this.start();
      return this.inflight;
    }
    if (!this.next) {
      this.next = this.inflight
        .catch(() => undefined)
        .then(() => {
          this.next = undefined;
          this.inflight = this.start();
          return this.inflight;
        });
    }
    return this.next;
  }

  private start(): Promise<void> {
    this.count++;
    const p = this.run().then(() => undefined);
    const done = () => {
      if (this.inflight === p) this.inflight = undefined;
    };
    p.then(done, done);
    return p;
  }
}
