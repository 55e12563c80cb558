import type { DocumentKind } from './extract.js';
import { jsonDepthOver } from './json-depth.js';
import type { DocumentLimits } from './limits.js';
import { over } from './limits.js';
import { declaredDocxOver } from './ooxml.js';

/** Bytes of a document's start kept to check its bounds before it is stored. */
export const HEAD_BYTES = 64 * 1024;
/** Bytes of a DOCX's end kept to read its central directory (a zip's end record is within the last 64 KB). */
export const TAIL_BYTES = 1024 * 1024;

/** Kinds whose first bytes can show a bound. */
export const HEAD_KINDS: ReadonlySet<DocumentKind> = new Set(['csv', 'json']);

export interface InspectInput {
  kind: DocumentKind;
  limits: DocumentLimits;
  /** The first bytes (up to `HEAD_BYTES`). */
  head?: Uint8Array;
  /** A DOCX's last bytes and its size. */
  tail?: Uint8Array;
  size?: number;
}

/**
 * The columns of a CSV's first record within its first bytes: commas outside quotes, up to the
 * first line end outside quotes (the extractor's csv-parse reads the same default dialect). A
 * linear scan, under a millisecond for `HEAD_BYTES`; csv-parse took 60 ms on a 64 KB header.
 */
function csvHeadOver(head: Buffer, limits: DocumentLimits) {
  let columns = 1;
  let quoted = false;
  for (let i = 0; i < head.length; i++) {
    const c = head[i];
    if (c === 0x22) quoted = !quoted;
    else if (quoted) continue;
    else if (c === 0x2c) {
      // Columns only grow as the record goes on: a record cut by the head already over the bound is over it.
      if (++columns > limits.maxCsvColumns) return over.csvColumns(1, undefined, limits);
    } else if (c === 0x0a || c === 0x0d) {
      // An empty first line is skipped, as the extractor does.
      if (i > 0 || columns > 1) return undefined;
    }
  }
  return undefined;
}

/**
 * The bounds a document is known to pass before any extraction: the columns of a CSV's first
 * record, a JSON's nesting within its first bytes, a DOCX's parts and declared sizes in its
 * central directory. Undefined when none is known to be passed (the extraction checks them all).
 */
export async function inspectDocument(input: InspectInput) {
  const { kind, limits } = input;
  const head = input.head
    ? Buffer.from(input.head.buffer, input.head.byteOffset, input.head.byteLength)
    : undefined;
  if (kind === 'csv' && head) return csvHeadOver(head, limits);
  if (kind === 'json' && head) {
    return jsonDepthOver(head.toString('utf8'), limits.maxJsonDepth) ? over.jsonDepth(limits) : undefined;
  }
  if (kind === 'docx' && input.tail && input.size !== undefined) {
    const tail = Buffer.from(input.tail.buffer, input.tail.byteOffset, input.tail.byteLength);
    return declaredDocxOver(tail, input.size, limits);
  }
  return undefined;
}
