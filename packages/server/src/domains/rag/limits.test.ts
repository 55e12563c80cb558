import { Readable } from 'node:stream';
import { deepJson, docxBomb, endlessWord, hugeCsvRecord, manyPagesPdf, wideCsv } from '@ai-suite/testkit';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Chunker, chunkSegments } from './chunk.js';
import { documentBatches } from './document-chunks.js';
import { buildDocx } from './documents.fixture.js';
import type { DocumentKind } from './extract.js';
import { HEAD_BYTES, inspectDocument, TAIL_BYTES } from './inspect.js';
import { DEFAULT_LIMITS, type DocumentLimits, LimitError, MIB } from './limits.js';

/** Every chunk of a document under `limits` (in-process: the worker runs this same code). */
async function chunksOf(kind: DocumentKind, bytes: Buffer, limits: Partial<DocumentLimits> = {}) {
  const pieces: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += 64 * 1024) pieces.push(bytes.subarray(i, i + 64 * 1024));
  let n = 0;
  for await (const batch of documentBatches(Readable.from(pieces), {
    kind,
    limits: { ...DEFAULT_LIMITS, ...limits },
    batch: 64,
  })) {
    n += batch.length;
  }
  return n;
}

const rejection = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (err: unknown) => err,
  );

describe('document bounds, checked while extracting', () => {
  it('PDF pages: counted before any page is read', async () => {
    const err = await rejection(chunksOf('pdf', manyPagesPdf(3000)));
    expect(err).toBeInstanceOf(LimitError);
    expect((err as Error).message).toBe('PDF has 3000 pages; the limit is 2000');
  });

  it('CSV columns and record bytes', async () => {
    const wide = await rejection(chunksOf('csv', Buffer.from('a,b\n1,2\n1,2,3,4\n'), { maxCsvColumns: 3 }));
    expect((wide as Error).message).toBe('CSV record 3 has 4 columns; the limit is 3');
    const huge = await rejection(chunksOf('csv', hugeCsvRecord(2 * MIB)));
    expect(huge).toBeInstanceOf(LimitError);
    expect((huge as Error).message).toBe('CSV record 2 is larger than 1 MB; the limit is 1 MB');
  });

  it('DOCX: an XML part inflating past the bound stops the inflation there', async () => {
    const err = await rejection(chunksOf('docx', docxBomb({ inflatedBytes: 64 * MIB })));
    expect((err as Error).message).toBe(
      'DOCX part word/document.xml inflates to more than 8 MB; the limit is 8 MB per part',
    );
    const total = await rejection(
      chunksOf('docx', docxBomb({ inflatedBytes: 5 * MIB }), { maxOoxmlTotalBytes: 4 * MIB }),
    );
    expect((total as Error).message).toBe('DOCX inflates to more than 4 MB of XML; the limit is 4 MB');
  });

  it('DOCX whose headers lie about a part’s size: stopped at the declared size', async () => {
    const err = await rejection(chunksOf('docx', docxBomb({ inflatedBytes: 64 * MIB, declaredSize: 1000 })));
    expect((err as Error).message).toBe(
      'Invalid DOCX: part word/document.xml inflates to more than the 1000 bytes it declares',
    );
  });

  it('JSON depth, before parsing', async () => {
    const err = await rejection(chunksOf('json', deepJson(100_000)));
    expect((err as Error).message).toBe('JSON is nested deeper than 64 levels; the limit is 64');
    await expect(chunksOf('json', deepJson(64))).resolves.toBe(1);
  });

  it('characters and chunks per document', async () => {
    const chars = await rejection(chunksOf('text', endlessWord(50_000), { maxChars: 40_000 }));
    expect((chars as Error).message).toBe(
      'Document has more than 40000 characters of text; the limit is 40000',
    );
    const chunks = await rejection(chunksOf('text', endlessWord(50_000), { maxChunks: 10 }));
    expect((chunks as Error).message).toBe('Document has more than 10 chunks; the limit is 10');
  });

  it('a CSV record of 100,000 columns under a raised bound is chunked in linear time', async () => {
    // Intl.Segmenter over the whole record took about a minute at 20,000 columns.
    const n = await chunksOf('csv', wideCsv(100_000), { maxCsvColumns: 200_000 });
    expect(n).toBeGreaterThan(900);
  }, 60_000);

  it('one endless word: hard cuts of 1000 characters', async () => {
    const n = await chunksOf('text', endlessWord(2 * MIB));
    // Each 64 KB read ends a piece: a few chunks shorter than 1000.
    expect(n).toBeGreaterThanOrEqual(Math.ceil((2 * MIB) / 1000));
    expect(n).toBeLessThan(2 * Math.ceil((2 * MIB) / 1000));
  });
});

describe('bounds known from the first (or last) bytes', () => {
  const head = (b: Buffer) => b.subarray(0, HEAD_BYTES);
  it('a CSV header over the column bound, a JSON too deep', async () => {
    const csv = await inspectDocument({ kind: 'csv', limits: DEFAULT_LIMITS, head: head(wideCsv()) });
    expect(csv?.message).toBe('CSV record 1 has more than 2000 columns; the limit is 2000');
    const json = await inspectDocument({ kind: 'json', limits: DEFAULT_LIMITS, head: head(deepJson()) });
    expect(json?.message).toBe('JSON is nested deeper than 64 levels; the limit is 64');
    // Nothing known yet: a record longer than the first bytes, an ordinary file.
    expect(await inspectDocument({ kind: 'csv', limits: DEFAULT_LIMITS, head: head(hugeCsvRecord()) })).toBe(
      undefined,
    );
    expect(
      await inspectDocument({ kind: 'csv', limits: DEFAULT_LIMITS, head: Buffer.from('a,b\n1,2\n') }),
    ).toBe(undefined);
  });

  it('a DOCX central directory declaring a part over the bound; one that tells the truth passes', async () => {
    const bomb = docxBomb();
    const tail = bomb.subarray(Math.max(0, bomb.length - TAIL_BYTES));
    const err = await inspectDocument({ kind: 'docx', limits: DEFAULT_LIMITS, tail, size: bomb.length });
    expect(err?.message).toBe(
      'DOCX part word/document.xml inflates to more than 8 MB; the limit is 8 MB per part',
    );
    const liar = docxBomb({ declaredSize: 1000 });
    expect(
      await inspectDocument({
        kind: 'docx',
        limits: DEFAULT_LIMITS,
        tail: liar.subarray(liar.length - TAIL_BYTES),
        size: liar.length,
      }),
    ).toBe(undefined);
    const fine = await buildDocx([{ paragraph: 'Hello.' }]);
    expect(
      await inspectDocument({ kind: 'docx', limits: DEFAULT_LIMITS, tail: fine, size: fine.length }),
    ).toBe(undefined);
    // The directory lies before the bytes kept: nothing known.
    expect(
      await inspectDocument({
        kind: 'docx',
        limits: DEFAULT_LIMITS,
        tail: bomb.subarray(-100),
        size: bomb.length,
      }),
    ).toBe(undefined);
  });
});

describe('chunking in windows', () => {
  const word = fc.stringMatching(/^[a-zA-Z0-9éß]{1,14}$/);
  const sentenceEnd = fc.constantFrom('. ', '? ', '! ', ' ', ' ', ' ', ', ', '\n');
  const prose = fc
    .array(fc.tuple(word, sentenceEnd), { minLength: 100, maxLength: 1500 })
    .map((ws) => ws.flat().join(''));

  it('cuts text exactly as segmenting it whole would (property)', () => {
    fc.assert(
      fc.property(prose, fc.integer({ min: 20, max: 1200 }), (text, max) => {
        const seg = [{ page: 1, text, kind: 'prose' as const }];
        const windowed = chunkSegments(seg, max);
        const c = new Chunker(max, Number.POSITIVE_INFINITY);
        const whole = [...c.push(seg[0] as (typeof seg)[0]), ...c.end()];
        expect(windowed).toEqual(whole);
      }),
      { numRuns: 60 },
    );
  });

  it('records longer than a window: the same cuts too', () => {
    const record = Array.from({ length: 3000 }, (_, i) => `column ${i}: value ${i % 13}`).join('; ');
    const seg = [{ page: 1, text: record, kind: 'record' as const }];
    const c = new Chunker(1000, Number.POSITIVE_INFINITY);
    expect(chunkSegments(seg)).toEqual([...c.push(seg[0] as (typeof seg)[0]), ...c.end()]);
  });
});
