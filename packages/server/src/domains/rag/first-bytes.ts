import { Readable, Transform, type TransformCallback } from 'node:stream';

/**
 * Reads the first `n` bytes of `stream` (fewer if it ends first). `body` is the whole stream
 * again (those bytes, then the rest, read on demand); `discard()` drains the rest unread.
 */
export async function takeHead(
  stream: Readable,
  n: number,
): Promise<{ head: Buffer; body: Readable; discard(): void }> {
  const it = stream[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  const parts: Buffer[] = [];
  let size = 0;
  let ended = false;
  while (size < n) {
    const r = await it.next();
    if (r.done) {
      ended = true;
      break;
    }
    parts.push(r.value);
    size += r.value.length;
  }
  const first = Buffer.concat(parts);
  async function* whole() {
    yield first;
    if (ended) return;
    for (;;) {
      const r = await it.next();
      if (r.done) return;
      yield r.value;
    }
  }
  return {
    head: first.subarray(0, n),
    body: Readable.from(whole(), { objectMode: false }),
    discard: () => {
      if (!ended) stream.resume();
    },
  };
}

/** Passes bytes through and keeps the last `n` of them (a zip's central directory is at its end). */
export class TailKeeper extends Transform {
  private parts: Buffer[] = [];
  private kept = 0;

  constructor(private readonly n: number) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback) {
    this.parts.push(chunk);
    this.kept += chunk.length;
    while (this.parts.length > 1 && this.kept - (this.parts[0] as Buffer).length >= this.n) {
      this.kept -= (this.parts.shift() as Buffer).length;
    }
    done(null, chunk);
  }

  /** The last `n` bytes seen. */
  tail(): Buffer {
    const all = Buffer.concat(this.parts);
    return all.subarray(Math.max(0, all.length - this.n));
  }
}
