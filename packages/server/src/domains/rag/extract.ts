import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { CsvError, parse as parseCsv } from 'csv-parse';
import type { Segment } from './chunk.js';
import { jsonDepthOver } from './json-depth.js';
import { DEFAULT_LIMITS, type DocumentLimits, ExtractionError, over } from './limits.js';
import { boundedDocx } from './ooxml.js';

export { ExtractionError };

/** The document kinds of spec 4.12, by what they are read as. */
export type DocumentKind = 'text' | 'markdown' | 'csv' | 'json' | 'pdf' | 'docx';

export const DOCX_MIME = 'application/vnd.openxmlformats-officedocument.wordprocessingml.document';

const BY_EXTENSION: Record<string, { kind: DocumentKind; mime: string }> = {
  txt: { kind: 'text', mime: 'text/plain' },
  md: { kind: 'markdown', mime: 'text/markdown' },
  markdown: { kind: 'markdown', mime: 'text/markdown' },
  csv: { kind: 'csv', mime: 'text/csv' },
  json: { kind: 'json', mime: 'application/json' },
  pdf: { kind: 'pdf', mime: 'application/pdf' },
  docx: { kind: 'docx', mime: DOCX_MIME },
};

const BY_MIME: Record<string, DocumentKind> = {
  'text/plain': 'text',
  'text/markdown': 'markdown',
  'text/x-markdown': 'markdown',
  'text/csv': 'csv',
  'application/csv': 'csv',
  'application/json': 'json',
  'application/pdf': 'pdf',
  [DOCX_MIME]: 'docx',
};

/** Generic types clients send when they do not know better: the extension decides then. */
const GENERIC_MIME = new Set(['', 'application/octet-stream', 'binary/octet-stream']);

/**
 * What a file is read as: its extension when it names a supported type, else its declared
 * MIME type. Undefined when neither is supported; `type` is then what the error names.
 */
export function documentKind(
  filename: string,
  mimeType: string | undefined,
): { kind: DocumentKind; mime: string } | { kind: undefined; type: string } {
  const ext = /\.([A-Za-z0-9]+)$/.exec(filename)?.[1]?.toLowerCase();
  const byExt = ext ? BY_EXTENSION[ext] : undefined;
  if (byExt) return byExt;
  const mime = (mimeType ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
  const byMime = BY_MIME[mime];
  if (byMime) return { kind: byMime, mime };
  return { kind: undefined, type: GENERIC_MIME.has(mime) ? (ext ? `.${ext}` : 'unknown') : mime };
}

async function readAll(body: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of body) parts.push(Buffer.isBuffer(c) ? c : Buffer.from(c as Uint8Array));
  return Buffer.concat(parts);
}

/** Plain text, streamed: decoded piece by piece (UTF-8 sequences split across reads are kept whole). */
async function* textSegments(body: Readable): AsyncGenerator<Segment> {
  const decoder = new StringDecoder('utf8');
  let first = true;
  for await (const c of body) {
    let text = decoder.write(Buffer.isBuffer(c) ? c : Buffer.from(c as Uint8Array));
    if (first && text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    first = false;
    if (text) yield { page: 1, text, kind: 'prose' };
  }
  const rest = decoder.end();
  if (rest) yield { page: 1, text: rest, kind: 'prose' };
}

/**
 * CSV, streamed through csv-parse: the first row is the header; every following row becomes
 * one record `header: value; header: value`, so each chunk keeps the column names.
 */
async function* csvSegments(body: Readable, limits: DocumentLimits): AsyncGenerator<Segment> {
  const parser = body.pipe(
    parseCsv({
      bom: true,
      relax_column_count: true,
      skip_empty_lines: true,
      trim: true,
      max_record_size: limits.maxCsvRecordBytes,
    }),
  );
  let headers: string[] | undefined;
  let record = 0;
  try {
    for await (const row of parser as AsyncIterable<string[]>) {
      record++;
      if (row.length > limits.maxCsvColumns) throw over.csvColumns(record, row.length, limits);
      if (!headers) {
        headers = row.map((h, i) => h || `column ${i + 1}`);
        continue;
      }
      const cells = row
        .map((v, i) => (v === '' ? undefined : `${(headers as string[])[i] ?? `column ${i + 1}`}: ${v}`))
        .filter(Boolean);
      if (cells.length > 0) yield { page: 1, text: cells.join('; '), kind: 'record' };
    }
  } catch (err) {
    body.destroy();
    if (err instanceof ExtractionError) throw err;
    if (err instanceof CsvError && err.code === 'CSV_MAX_RECORD_SIZE') {
      // The parser may be records ahead of this loop: its own count says which record.
      const parsed = (err as CsvError & { records?: number }).records;
      throw over.csvRecordBytes((typeof parsed === 'number' ? parsed : record) + 1, limits);
    }
    throw new ExtractionError(`Invalid CSV: ${(err as Error).message}`);
  }
}

/** JSON flattened to one record per leaf: `orders[0].customer.name: Ada`. */
function* flattenJson(value: unknown, path: string): Generator<string> {
  if (Array.isArray(value)) {
    if (value.length === 0) yield `${path || '$'}: []`;
    for (let i = 0; i < value.length; i++) yield* flattenJson(value[i], `${path}[${i}]`);
  } else if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value);
    if (entries.length === 0) yield `${path || '$'}: {}`;
    for (const [k, v] of entries) yield* flattenJson(v, path ? `${path}.${k}` : k);
  } else {
    yield `${path || '$'}: ${value === null ? 'null' : String(value)}`;
  }
}

async function* jsonSegments(body: Readable, limits: DocumentLimits): AsyncGenerator<Segment> {
  let parsed: unknown;
  const text = (await readAll(body)).toString('utf8').replace(/^\uFEFF/, '');
  // Before parsing: the flattening below recurses once per level.
  if (jsonDepthOver(text, limits.maxJsonDepth)) throw over.jsonDepth(limits);
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new ExtractionError(`Invalid JSON: ${(err as Error).message}`);
  }
  for (const line of flattenJson(parsed, '')) yield { page: 1, text: line, kind: 'record' };
}

/** PDF text page by page (unpdf, which bundles a server build of pdf.js). */
async function* pdfSegments(body: Readable, limits: DocumentLimits): AsyncGenerator<Segment> {
  const { getDocumentProxy } = await import('unpdf');
  let doc: Awaited<ReturnType<typeof getDocumentProxy>>;
  try {
    doc = await getDocumentProxy(new Uint8Array(await readAll(body)));
  } catch (err) {
    throw new ExtractionError(`Invalid PDF: ${(err as Error).message}`);
  }
  try {
    if (doc.numPages > limits.maxPdfPages) throw over.pdfPages(doc.numPages, limits);
    for (let n = 1; n <= doc.numPages; n++) {
      const page = await doc.getPage(n);
      const content = await page.getTextContent();
      let text = '';
      for (const item of content.items) {
        if (!('str' in item)) continue;
        text += item.str;
        // Lines of a PDF wrap mid-sentence: a line end is a space, not a sentence boundary.
        if (item.hasEOL || (item.str && !/\s$/.test(item.str))) text += ' ';
      }
      page.cleanup();
      if (text.trim()) yield { page: n, text: `${text.replace(/\s+/g, ' ').trim()}\n`, kind: 'prose' };
    }
  } finally {
    await doc.destroy();
  }
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ' };
const decodeEntities = (s: string) =>
  s.replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (m, e: string) => {
    if (e[0] === '#') {
      const code = e[1] === 'x' || e[1] === 'X' ? Number.parseInt(e.slice(2), 16) : Number(e.slice(1));
      return Number.isFinite(code) ? String.fromCodePoint(code) : m;
    }
    return ENTITIES[e.toLowerCase()] ?? m;
  });

/**
 * DOCX through mammoth's HTML (its plain-text output loses table structure): paragraphs and
 * headings are prose; each table row becomes one record of its cells joined by ` | `. Mammoth
 * reads only the bounded copy `boundedDocx` makes (its XML parts inflated under the limits,
 * stored uncompressed; images left empty and never read).
 */
async function* docxSegments(body: Readable, limits: DocumentLimits): AsyncGenerator<Segment> {
  const zip = await boundedDocx(await readAll(body), limits);
  const mammoth = (await import('mammoth')).default;
  let html: string;
  try {
    html = (
      await mammoth.convertToHtml(
        { buffer: zip },
        { convertImage: mammoth.images.imgElement(async () => ({ src: '' })) },
      )
    ).value;
  } catch (err) {
    throw new ExtractionError(`Invalid DOCX: ${(err as Error).message}`);
  }
  const blocks = /<table>[\s\S]*?<\/table>|<(p|h[1-6]|li)>[\s\S]*?<\/\1>/g;
  const strip = (s: string) =>
    decodeEntities(s.replace(/<br\s*\/?>/g, '\n').replace(/<[^>]+>/g, ''))
      .replace(/[ \t]+/g, ' ')
      .trim();
  for (const m of html.matchAll(blocks)) {
    const block = m[0];
    if (block.startsWith('<table>')) {
      for (const row of block.matchAll(/<tr>([\s\S]*?)<\/tr>/g)) {
        const cells = [...(row[1] ?? '').matchAll(/<t[dh][^>]*>([\s\S]*?)<\/t[dh]>/g)].map((c) =>
          strip(c[1] ?? ''),
        );
        if (cells.some(Boolean)) yield { page: 1, text: cells.join(' | '), kind: 'record' };
      }
    } else {
      const text = strip(block);
      // A line break ends a sentence for Intl.Segmenter (UAX #29), so headings stay apart.
      if (text) yield { page: 1, text: `${text}\n`, kind: 'prose' };
    }
  }
}

const KIND_LABEL: Record<DocumentKind, string> = {
  text: 'text',
  markdown: 'Markdown',
  csv: 'CSV',
  json: 'JSON',
  pdf: 'PDF',
  docx: 'DOCX',
};

function segmentsOfKind(kind: DocumentKind, body: Readable, limits: DocumentLimits): AsyncGenerator<Segment> {
  switch (kind) {
    case 'text':
    case 'markdown':
      return textSegments(body);
    case 'csv':
      return csvSegments(body, limits);
    case 'json':
      return jsonSegments(body, limits);
    case 'pdf':
      return pdfSegments(body, limits);
    case 'docx':
      return docxSegments(body, limits);
  }
}

/**
 * The text of a document as segments, in order. Text, Markdown and CSV are streamed; JSON,
 * PDF and DOCX are parsed from one buffer (their formats need the whole file: a PDF's index
 * is at its end, a DOCX is a zip), bounded by the 100 MB upload limit. Every failure is an
 * `ExtractionError` (a `LimitError` when a bound of `limits` is passed): whatever the bytes,
 * a parser's own exception reports the document as invalid, never the service as failing.
 */
export async function* extractSegments(
  kind: DocumentKind,
  body: Readable,
  limits: DocumentLimits = DEFAULT_LIMITS,
): AsyncGenerator<Segment> {
  let chars = 0;
  try {
    for await (const seg of segmentsOfKind(kind, body, limits)) {
      chars += seg.text.length;
      if (chars > limits.maxChars) throw over.chars(limits);
      yield seg;
    }
  } catch (err) {
    body.destroy();
    if (err instanceof ExtractionError) throw err;
    throw new ExtractionError(`Invalid ${KIND_LABEL[kind]}: ${(err as Error)?.message ?? String(err)}`);
  }
}
