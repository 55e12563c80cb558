/**
 * The extraction worker (decision 0040): a thread of the document pool (`document-pool.ts`,
 * piscina) that extracts and chunks one untrusted document at a time, under the pool's memory
 * limit, and is terminated when it runs over its time. It does CPU work only: it reads the
 * document from a local spool file the main thread filled before the job got its turn, and
 * writes the chunk batches to a second spool file the main thread reads at its own pace (it
 * embeds and stores them after the worker has moved on). It never waits for the main thread.
 */
import fs from 'node:fs';
import type { MessagePort } from 'node:worker_threads';
import { type ChunkJob, documentBatches, ResumeMismatchError } from './document-chunks.js';
import { RECORD_HEADER } from './document-spool.js';
import { type InspectInput, inspectDocument } from './inspect.js';
import { ExtractionError, LimitError } from './limits.js';

export interface ExtractTask extends ChunkJob {
  /** The document's bytes (a spool file the main thread wrote). */
  input: string;
  /** Where the batches go: records of a 4-byte big-endian length and a JSON array of chunks. */
  output: string;
  port: MessagePort;
}

export interface InspectTask extends InspectInput {
  port: MessagePort;
}

/** Worker → main thread, while the job runs. */
export type WorkerMessage =
  | { t: 'start' }
  /** The output spool holds whole records up to `end`. */
  | { t: 'batch'; end: number };

/** The job's outcome (the task's result): the spool's final length, and the failure if any. */
export type ExtractResult =
  | { ok: true; end: number }
  | { ok: false; end: number; reason: 'limit' | 'invalid' | 'resume' | 'read'; message: string };

export default async function extract(task: ExtractTask): Promise<ExtractResult> {
  const { port } = task;
  const post = (m: WorkerMessage) => port.postMessage(m);
  post({ t: 'start' });
  const body = fs.createReadStream(task.input);
  const out = fs.openSync(task.output, 'r+');
  let readError: unknown;
  body.once('error', (err) => {
    readError = err;
  });
  let end = 0;
  try {
    for await (const chunks of documentBatches(body, task)) {
      const json = Buffer.from(JSON.stringify(chunks));
      const record = Buffer.allocUnsafe(RECORD_HEADER + json.length);
      record.writeUInt32BE(json.length, 0);
      json.copy(record, RECORD_HEADER);
      for (let off = 0; off < record.length; ) {
        off += fs.writeSync(out, record, off, record.length - off, end + off);
      }
      end += record.length;
      post({ t: 'batch', end });
    }
    return { ok: true, end };
  } catch (err) {
    const failed = (reason: 'limit' | 'invalid' | 'resume' | 'read', message: string): ExtractResult => ({
      ok: false,
      end,
      reason,
      message,
    });
    if (readError) return failed('read', 'the spooled document could not be read');
    if (err instanceof ResumeMismatchError) return failed('resume', err.message);
    if (err instanceof LimitError) return failed('limit', err.message);
    if (err instanceof ExtractionError) return failed('invalid', err.message);
    throw err;
  } finally {
    body.destroy();
    fs.closeSync(out);
    port.close();
  }
}

/** The bounds a document's first (and, for a DOCX, last) bytes already show: the message, or null. */
export async function inspect(task: InspectTask): Promise<string | null> {
  const { port, ...input } = task;
  port.postMessage({ t: 'start' } satisfies WorkerMessage);
  port.close();
  return (await inspectDocument(input))?.message ?? null;
}
