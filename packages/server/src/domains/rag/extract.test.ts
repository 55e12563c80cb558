import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { CHUNK_CHARS, type Chunk, Chunker, chunkSegments } from './chunk.js';
import { buildDocx, buildPdf } from './documents.fixture.js';
import { type DocumentKind, documentKind, ExtractionError, extractSegments } from './extract.js';

async function chunksOf(kind: DocumentKind, body: Buffer | string, readSize = 64 * 1024): Promise<Chunk[]> {
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body);
  // Deliver the bytes in small reads, as a network stream would (multi-byte characters split).
  const pieces: Buffer[] = [];
  for (let i = 0; i < buf.length; i += readSize) pieces.push(buf.subarray(i, i + readSize));
  const chunker = new Chunker();
  const out: Chunk[] = [];
  for await (const seg of extractSegments(kind, Readable.from(pieces))) out.push(...chunker.push(seg));
  out.push(...chunker.end());
  return out;
}

const sentence = (i: number) => `Sentence number ${i} talks about topic ${i % 7} in some detail. `;

describe('document kinds', () => {
  it('reads the extension first, then the declared MIME type', () => {
    expect(documentKind('a.PDF', 'application/octet-stream')).toMatchObject({ kind: 'pdf' });
    expect(documentKind('notes', 'text/markdown')).toMatchObject({ kind: 'markdown' });
    expect(documentKind('report.docx', '')).toMatchObject({ kind: 'docx' });
    expect(documentKind('photo.png', 'image/png')).toEqual({ kind: undefined, type: 'image/png' });
    expect(documentKind('archive.zip', 'application/octet-stream')).toEqual({
      kind: undefined,
      type: '.zip',
    });
  });
});

describe('chunking', () => {
  it('packs sentences into chunks of about 1000 characters without cutting a sentence', () => {
    const text = Array.from({ length: 200 }, (_, i) => sentence(i)).join('');
    const chunks = chunkSegments([{ page: 1, text, kind: 'prose' }]);
    expect(chunks.length).toBeGreaterThan(5);
    for (const c of chunks) {
      expect(c.content.length).toBeLessThanOrEqual(CHUNK_CHARS);
      if (c !== chunks.at(-1)) expect(c.content.length).toBeGreaterThan(CHUNK_CHARS - 80);
      expect(c.content).toMatch(/^Sentence number \d+/);
      expect(c.content).toMatch(/detail\.$/);
    }
    expect(chunks.at(-1)?.content).toContain('Sentence number 199 ');
    expect(chunks.map((c) => c.index)).toEqual(chunks.map((_, i) => i));
  });

  it('cuts one overlong sentence at word boundaries', () => {
    const text = `${'word '.repeat(700)}end.`;
    const chunks = chunkSegments([{ page: 1, text, kind: 'prose' }]);
    expect(chunks.length).toBe(4);
    for (const c of chunks) expect(c.content.length).toBeLessThanOrEqual(CHUNK_CHARS);
    expect(chunks.map((c) => c.content).join(' ')).toBe(text.trim().replace(/\s+/g, ' '));
  });

  it('streams: the same chunks whatever the read size, with UTF-8 split across reads', async () => {
    const text = Array.from({ length: 60 }, (_, i) => `Ärger über Straße ${i} — naïve café. `).join('');
    const whole = await chunksOf('text', text, 1 << 20);
    const tiny = await chunksOf('text', text, 7);
    expect(tiny).toEqual(whole);
    expect(whole.map((c) => c.content).join(' ')).toContain('Straße 59 — naïve café.');
  });
});

describe('extraction', () => {
  it('PDF: text per page, chunks never span pages', async () => {
    const pdf = await buildPdf([
      Array.from({ length: 30 }, (_, i) => sentence(i)).join(''),
      'The warranty of the blue kettle lasts seven years.',
      'Page three is about something else entirely.',
    ]);
    const chunks = await chunksOf('pdf', pdf);
    expect(new Set(chunks.map((c) => c.page))).toEqual(new Set([1, 2, 3]));
    const page2 = chunks.filter((c) => c.page === 2);
    expect(page2).toHaveLength(1);
    expect(page2[0]?.content).toBe('The warranty of the blue kettle lasts seven years.');
    // Wrapped lines of page 1 are joined back into sentences.
    expect(chunks[0]?.content).toMatch(
      /^Sentence number 0 talks about topic 0 in some detail\. Sentence number 1/,
    );
  });

  it('DOCX: paragraphs and table rows', async () => {
    const docx = await buildDocx([
      { paragraph: 'Quarterly report' },
      { paragraph: 'Revenue grew in the north & the south.' },
      {
        table: [
          ['Region', 'Revenue'],
          ['North', '120'],
        ],
      },
    ]);
    const chunks = await chunksOf('docx', docx);
    expect(chunks.map((c) => c.content).join('\n')).toBe(
      'Quarterly report Revenue grew in the north & the south.\nRegion | Revenue\nNorth | 120',
    );
  });

  it('CSV: every chunk keeps the column headers', async () => {
    const rows = Array.from({ length: 200 }, (_, i) => `${i},"Widget ${i}",${(i * 1.5).toFixed(2)}`);
    const csv = `\uFEFFid,name,price\n${rows.join('\n')}\n`;
    const chunks = await chunksOf('csv', csv, 100);
    expect(chunks.length).toBeGreaterThan(3);
    for (const c of chunks) {
      for (const line of c.content.split('\n'))
        expect(line).toMatch(/^id: \d+; name: Widget \d+; price: [\d.]+$/);
    }
    expect(chunks[0]?.content.split('\n')[0]).toBe('id: 0; name: Widget 0; price: 0.00');
  });

  it('JSON: flattened to key paths', async () => {
    const json = JSON.stringify({ orders: [{ customer: { name: 'Ada' }, total: 12 }], open: true, tags: [] });
    const chunks = await chunksOf('json', json);
    expect(chunks[0]?.content).toBe(
      'orders[0].customer.name: Ada\norders[0].total: 12\nopen: true\ntags: []',
    );
  });

  it('Markdown and text are read as prose', async () => {
    const chunks = await chunksOf('markdown', '# Title\n\nFirst paragraph. Second sentence.\n');
    expect(chunks).toEqual([{ index: 0, page: 1, content: '# Title First paragraph. Second sentence.' }]);
  });

  it('a broken PDF or JSON is an extraction error', async () => {
    await expect(chunksOf('pdf', 'not a pdf')).rejects.toBeInstanceOf(ExtractionError);
    await expect(chunksOf('json', '{"a":')).rejects.toBeInstanceOf(ExtractionError);
    await expect(chunksOf('docx', 'not a zip')).rejects.toBeInstanceOf(ExtractionError);
  });
});
