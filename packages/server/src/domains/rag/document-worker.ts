/**
 * The extraction worker (decision 0040): a thread of the document pool (`document-pool.ts`,
 * piscina) that extracts and chunks one untrusted document at a time, under the pool's memory
 * limit, and is terminated when it runs over its time. It reads the object's bytes from the
 * main thread and hands chunk batches back over the job's MessagePort, both with
 * backpressure.
 */
import { Readable } from 'node:stream';
import type { MessagePort } from 'node:worker_threads';
import type { Chunk } from './chunk.js';
import { type ChunkJob, documentBatches, ResumeMismatchError } from './document-chunks.js';
import { type InspectInput, inspectDocument } from './inspect.js';
import { ExtractionError, LimitError } from './limits.js';

export interface ExtractTask extends ChunkJob {
  port: MessagePort;
}

/** Worker → main thread. */
export type WorkerMessage =
  | { t: 'start' }
  | { t: 'pull' }
  | { t: 'chunks'; chunks: Chunk[] }
  | { t: 'done' }
  | { t: 'failed'; reason: 'limit' | 'invalid' | 'resume'; message: string };

/** Main thread → worker. */
export type MainMessage =
  | { t: 'data'; bytes: Uint8Array }
  | { t: 'end' }
  | { t: 'error'; message: string }
  | { t: 'ack' };

/** Batches handed out and not yet acknowledged before the worker waits. */
export const BATCH_WINDOW = 2;

export default async function extract(task: ExtractTask): Promise<void> {
  const { port } = task;
  let acked = 0;
  let onAck: (() => void) | undefined;
  const body = new Readable({
    read() {
      port.postMessage({ t: 'pull' } satisfies WorkerMessage);
    },
  });
  port.on('message', (m: MainMessage) => {
    if (m.t === 'data') body.push(Buffer.from(m.bytes.buffer, m.bytes.byteOffset, m.bytes.byteLength));
    else if (m.t === 'end') body.push(null);
    else if (m.t === 'error') body.destroy(new Error(m.message));
    else if (m.t === 'ack') {
      acked++;
      onAck?.();
    }
  });
  const post = (m: WorkerMessage) => port.postMessage(m);
  post({ t: 'start' });
  let sent = 0;
  try {
    for await (const chunks of documentBatches(body, task)) {
      post({ t: 'chunks', chunks });
      sent++;
      while (sent - acked >= BATCH_WINDOW) {
        await new Promise<void>((resolve) => {
          onAck = resolve;
        });
      }
    }
    post({ t: 'done' });
  } catch (err) {
    if (err instanceof ResumeMismatchError) post({ t: 'failed', reason: 'resume', message: err.message });
    else if (err instanceof LimitError) post({ t: 'failed', reason: 'limit', message: err.message });
    else if (err instanceof ExtractionError) post({ t: 'failed', reason: 'invalid', message: err.message });
    else throw err;
  } finally {
    body.destroy();
    port.close();
  }
}

/** The bounds a document's first (and, for a DOCX, last) bytes already show: the message, or null. */
export async function inspect(input: InspectInput): Promise<string | null> {
  return (await inspectDocument(input))?.message ?? null;
}
