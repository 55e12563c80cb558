import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../../data-dir.js';
import type { Chunk } from './chunk.js';
import { ExtractionError, sizeLabel } from './limits.js';

/** Bytes of a record's length prefix in an output spool. */
export const RECORD_HEADER = 4;

/**
 * The spool files of one job, in a directory of this process (`<tmpDir>/documents-<pid>`):
 * the document's bytes (`input`) and the chunk batches (`output`). The worker opens them by
 * path (its descriptors are its own, closed if it is terminated); `remove()` deletes both.
 * A process that crashed leaves its directory behind: the next pool removes the directories
 * of processes that no longer run.
 */
export interface SpoolFiles {
  input: string;
  output: string;
  remove(): Promise<void>;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** Removes the spool directories of processes that no longer run (a crash left them). */
export async function sweepSpools(tmpDir: string): Promise<void> {
  const entries = await fsp.readdir(tmpDir).catch(() => [] as string[]);
  for (const name of entries) {
    const pid = /^documents-(\d+)$/.exec(name)?.[1];
    if (pid && Number(pid) !== process.pid && !alive(Number(pid))) {
      await fsp.rm(path.join(tmpDir, name), { recursive: true, force: true });
    }
  }
}

export async function spoolFiles(tmpDir: string): Promise<SpoolFiles> {
  const dir = path.join(tmpDir, `documents-${process.pid}`);
  await fsp.mkdir(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  const id = randomUUID();
  const input = path.join(dir, `${id}.in`);
  const output = path.join(dir, `${id}.out`);
  await fsp.writeFile(output, '', { flag: 'wx', mode: PRIVATE_FILE_MODE });
  return {
    input,
    output,
    remove: async () => {
      await Promise.all([fsp.rm(input, { force: true }), fsp.rm(output, { force: true })]);
    },
  };
}

/**
 * Copies a document's stream into `file` (its bytes bounded by `maxBytes`), so the worker
 * that extracts it reads a local file and never waits for the object store. A stream of
 * strings (`Readable.from(['…'])`) is written as UTF-8. Throws the stream's own read error.
 */
export async function spoolDocument(body: Readable, file: string, maxBytes: number): Promise<number> {
  let bytes = 0;
  const bound = new Transform({
    transform(piece: Buffer | string, _enc, done) {
      const b = typeof piece === 'string' ? Buffer.from(piece) : piece;
      bytes += b.length;
      if (bytes > maxBytes) done(new ExtractionError(`Document is larger than ${sizeLabel(maxBytes)}`));
      else done(null, b);
    },
  });
  await pipeline(body, bound, fs.createWriteStream(file, { flags: 'wx', mode: PRIVATE_FILE_MODE }));
  return bytes;
}

/** Reads the chunk batches a worker wrote to an output spool (see `document-worker.ts`), in order. */
export class SpoolReader {
  private pos = 0;
  private header = Buffer.alloc(RECORD_HEADER);

  constructor(private readonly handle: fsp.FileHandle) {}

  /** Whether a record starts before `end` (the bytes the worker has written). */
  hasMore(end: number): boolean {
    return this.pos < end;
  }

  async next(): Promise<Chunk[]> {
    await this.readFully(this.header, this.pos);
    const length = this.header.readUInt32BE(0);
    const body = Buffer.allocUnsafe(length);
    await this.readFully(body, this.pos + RECORD_HEADER);
    this.pos += RECORD_HEADER + length;
    return JSON.parse(body.toString('utf8')) as Chunk[];
  }

  private async readFully(buf: Buffer, position: number) {
    for (let off = 0; off < buf.length; ) {
      const { bytesRead } = await this.handle.read(buf, off, buf.length - off, position + off);
      if (bytesRead === 0) throw new Error('the spool file ended early');
      off += bytesRead;
    }
  }
}
