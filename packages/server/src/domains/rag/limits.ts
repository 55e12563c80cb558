/**
 * The bounds on what one untrusted document may cost (docs/rag.md, "Bounds"). Plain data: they
 * travel to the extraction worker with each job.
 */
export interface DocumentLimits {
  /** Pages of a PDF (its page tree's count, read before any page). */
  maxPdfPages: number;
  /** Columns of one CSV record (the header row included). */
  maxCsvColumns: number;
  /** Bytes of one CSV record, the sum of its fields (csv-parse's `max_record_size`). */
  maxCsvRecordBytes: number;
  /** Entries of a DOCX (zip) central directory. */
  maxOoxmlParts: number;
  /** Inflated bytes of one XML part of a DOCX, counted while inflating. */
  maxOoxmlPartBytes: number;
  /** Inflated bytes of all the XML parts of a DOCX together. */
  maxOoxmlTotalBytes: number;
  /** Nesting depth of a JSON document (arrays and objects). */
  maxJsonDepth: number;
  /** Characters of text extracted from one document. */
  maxChars: number;
  /** Chunks of one document. */
  maxChunks: number;
}

export const MIB = 1024 * 1024;

export const DEFAULT_LIMITS: DocumentLimits = {
  maxPdfPages: 2000,
  maxCsvColumns: 2000,
  maxCsvRecordBytes: MIB,
  maxOoxmlParts: 10_000,
  maxOoxmlPartBytes: 8 * MIB,
  maxOoxmlTotalBytes: 32 * MIB,
  maxJsonDepth: 64,
  maxChars: 200_000_000,
  maxChunks: 200_000,
};

/** A document whose content cannot be read as its type (a broken PDF, JSON that does not parse). */
export class ExtractionError extends Error {
  override name = 'ExtractionError';
}

/** A document over one of its bounds; the message names the bound and its value. */
export class LimitError extends ExtractionError {
  override name = 'LimitError';
}

/** Sizes as operators set them: whole MB when they are, bytes otherwise. */
export const sizeLabel = (bytes: number) =>
  bytes % MIB === 0 ? `${bytes / MIB} MB` : bytes % 1024 === 0 ? `${bytes / 1024} KB` : `${bytes} bytes`;

export const over = {
  pdfPages: (pages: number, l: DocumentLimits) =>
    new LimitError(`PDF has ${pages} pages; the limit is ${l.maxPdfPages}`),
  /** `columns` undefined: only the record's first bytes were read, already past the bound. */
  csvColumns: (record: number, columns: number | undefined, l: DocumentLimits) =>
    new LimitError(
      `CSV record ${record} has ${columns ?? `more than ${l.maxCsvColumns}`} columns; the limit is ${l.maxCsvColumns}`,
    ),
  csvRecordBytes: (record: number, l: DocumentLimits) =>
    new LimitError(
      `CSV record ${record} is larger than ${sizeLabel(l.maxCsvRecordBytes)}; the limit is ${sizeLabel(l.maxCsvRecordBytes)}`,
    ),
  ooxmlParts: (parts: number, l: DocumentLimits) =>
    new LimitError(`DOCX has ${parts} parts; the limit is ${l.maxOoxmlParts}`),
  ooxmlPart: (name: string, l: DocumentLimits) =>
    new LimitError(
      `DOCX part ${name} inflates to more than ${sizeLabel(l.maxOoxmlPartBytes)}; the limit is ${sizeLabel(l.maxOoxmlPartBytes)} per part`,
    ),
  ooxmlTotal: (l: DocumentLimits) =>
    new LimitError(
      `DOCX inflates to more than ${sizeLabel(l.maxOoxmlTotalBytes)} of XML; the limit is ${sizeLabel(l.maxOoxmlTotalBytes)}`,
    ),
  jsonDepth: (l: DocumentLimits) =>
    new LimitError(`JSON is nested deeper than ${l.maxJsonDepth} levels; the limit is ${l.maxJsonDepth}`),
  chars: (l: DocumentLimits) =>
    new LimitError(`Document has more than ${l.maxChars} characters of text; the limit is ${l.maxChars}`),
  chunks: (l: DocumentLimits) =>
    new LimitError(`Document has more than ${l.maxChunks} chunks; the limit is ${l.maxChunks}`),
  memory: (mb: number) =>
    new LimitError(`Extracting the document needed more than ${mb} MB of memory; the limit is ${mb} MB`),
  time: (ms: number) =>
    new LimitError(`Extracting the document took longer than ${ms / 1000} s; the limit is ${ms / 1000} s`),
};
