import type { Readable } from 'node:stream';
import { type Chunk, Chunker, chunkHash } from './chunk.js';
import { type DocumentKind, extractSegments } from './extract.js';
import { type DocumentLimits, over } from './limits.js';

/** The document no longer chunks as it did before an interruption: index it from the start. */
export class ResumeMismatchError extends Error {
  override name = 'ResumeMismatchError';
}

/** Where an interrupted indexing goes on: the chunk count stored and the hash of the last one. */
export interface Resume {
  from: number;
  lastHash: string;
}

export interface ChunkJob {
  kind: DocumentKind;
  limits: DocumentLimits;
  /** Chunks per batch handed out. */
  batch: number;
  resume?: Resume;
}

/**
 * The chunks of a document read from `body`, in batches of `job.batch`, from `resume.from` on
 * (the chunk before it must hash to `resume.lastHash`, else `ResumeMismatchError`: extraction
 * and chunking are deterministic, so the same object chunks the same way). Passing
 * `maxChunks` throws the bound's `LimitError`. Runs in the extraction worker (or, with
 * `DOCUMENT_WORKERS=0`, on the caller's thread).
 */
export async function* documentBatches(body: Readable, job: ChunkJob): AsyncGenerator<Chunk[]> {
  const chunker = new Chunker();
  const from = job.resume?.from ?? 0;
  let resumed = from === 0;
  let batch: Chunk[] = [];
  const take = (c: Chunk): Chunk[] | undefined => {
    if (c.index >= job.limits.maxChunks) throw over.chunks(job.limits);
    if (c.index < from) {
      if (c.index === from - 1) {
        if (chunkHash(c) !== job.resume?.lastHash) throw new ResumeMismatchError();
        resumed = true;
      }
      return undefined;
    }
    batch.push(c);
    if (batch.length < job.batch) return undefined;
    const full = batch;
    batch = [];
    return full;
  };
  for await (const seg of extractSegments(job.kind, body, job.limits)) {
    for (const c of chunker.push(seg)) {
      const full = take(c);
      if (full) yield full;
    }
  }
  for (const c of chunker.end()) {
    const full = take(c);
    if (full) yield full;
  }
  if (!resumed) throw new ResumeMismatchError();
  if (batch.length > 0) yield batch;
}
