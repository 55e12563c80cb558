import { CsvError } from 'csv-parse';
import { parse as parseCsvSync } from 'csv-parse/sync';
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

/** The CSV's first record, from the first bytes: more columns than the bound, or more bytes. */
function csvHeadOver(head: Buffer, limits: DocumentLimits) {
  let records: string[][];
  try {
    records = parseCsvSync(head, {
      bom: true,
      relax_column_count: true,
      skip_empty_lines: true,
      max_record_size: limits.maxCsvRecordBytes,
      to: 1,
    }) as string[][];
  } catch (err) {
    if (err instanceof CsvError && err.code === 'CSV_MAX_RECORD_SIZE') return over.csvRecordBytes(1, limits);
    // Cut inside a quoted field, or not a CSV: the extraction says.
    return undefined;
  }
  const first = records[0];
  // Columns only grow as the record goes on: a cut record already over the bound is over it.
  if (first && first.length > limits.maxCsvColumns) return over.csvColumns(1, undefined, limits);
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
