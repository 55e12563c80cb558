import { PassThrough, type Readable, Transform, type TransformCallback } from 'node:stream';

/**
 * Reads the first `n` bytes of `stream` (fewer if it ends first). `body` is the whole stream
 * again (those bytes, then the rest, piped on demand); `discard()` drains the rest unread.
 */
export async function takeHead(
  stream: Readable,
  n: number,
): Promise<{ head: Buffer; body: Readable; discard(): void }> {
  const parts: Buffer[] = [];
  let size = 0;
  let ended = false;
  await new Promise<void>((resolve, reject) => {
    const cleanup = () => {
      stream.off('readable', onReadable);
      stream.off('end', onEnd);
      stream.off('error', onError);
    };
    const onReadable = () => {
      while (size < n) {
        const c = stream.read() as Buffer | null;
        if (c === null) break;
        parts.push(c);
        size += c.length;
      }
      if (size >= n) {
        cleanup();
        resolve();
      }
    };
    const onEnd = () => {
      ended = true;
      cleanup();
      resolve();
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    stream.on('readable', onReadable);
    stream.on('end', onEnd);
    stream.on('error', onError);
  });
  const first = Buffer.concat(parts);
  const body = new PassThrough();
  body.write(first);
  if (ended) body.end();
  else {
    stream.once('error', (err) => body.destroy(err));
    stream.pipe(body);
  }
  return {
    head: first.subarray(0, n),
    body,
    discard: () => {
      body.destroy();
      if (!ended) {
        stream.unpipe(body);
        stream.resume();
      }
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
