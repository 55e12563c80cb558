import zlib from 'node:zlib';

/**
 * Documents a hostile caller uploads for document QA, generated on demand (never committed):
 * each one cheap to make and expensive to read naively. Sizes are parameters so tests can
 * shrink them; the defaults are the files of issue 38.
 */

/** A CSV whose header has `columns` columns (100,000: ~0.9 MB), then one row of digits. */
export function wideCsv(columns = 100_000): Buffer {
  const header = Array.from({ length: columns }, (_, i) => `c${i}`).join(',');
  const row = Array.from({ length: columns }, (_, i) => String(i % 10)).join(',');
  return Buffer.from(`${header}\n${row}\n`);
}

/** A CSV with one record of `bytes` bytes (a quoted field of one letter repeated). */
export function hugeCsvRecord(bytes = 16 * 1024 * 1024): Buffer {
  return Buffer.concat([Buffer.from('id,text\n1,"'), Buffer.alloc(bytes, 'a'), Buffer.from('"\n')]);
}

/** A text file of one word of `bytes` letters, no space, no sentence end. */
export function endlessWord(bytes = 16 * 1024 * 1024): Buffer {
  return Buffer.alloc(bytes, 'x');
}

/** JSON arrays nested `depth` deep: `[[[…]]]`. */
export function deepJson(depth = 100_000): Buffer {
  return Buffer.from(`${'['.repeat(depth)}${']'.repeat(depth)}`);
}

/**
 * A valid PDF of `pages` empty pages in one flat page tree (100,000: ~12 MB), written as PDF
 * syntax directly: pdf.js reads it page by page.
 */
export function manyPagesPdf(pages = 100_000): Buffer {
  const parts: string[] = ['%PDF-1.4\n'];
  const offsets: number[] = [];
  let size = parts[0]?.length ?? 0;
  const add = (s: string) => {
    parts.push(s);
    size += s.length;
  };
  const obj = (n: number, body: string) => {
    offsets[n] = size;
    add(`${n} 0 obj\n${body}\nendobj\n`);
  };
  obj(1, '<< /Type /Catalog /Pages 2 0 R >>');
  const kids: string[] = [];
  for (let i = 0; i < pages; i++) kids.push(`${i + 3} 0 R`);
  obj(2, `<< /Type /Pages /Count ${pages} /Kids [${kids.join(' ')}] >>`);
  for (let i = 0; i < pages; i++) obj(i + 3, '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>');
  const xref = size;
  const count = pages + 3;
  add(`xref\n0 ${count}\n0000000000 65535 f \n`);
  for (let n = 1; n < count; n++) add(`${String(offsets[n]).padStart(10, '0')} 00000 n \n`);
  add(`trailer\n<< /Size ${count} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`);
  return Buffer.from(parts.join(''), 'latin1');
}

interface ZipEntry {
  name: string;
  /** Deflated bytes (raw deflate). */
  data: Buffer;
  crc: number;
  size: number;
  /** What the headers say the entry inflates to (a liar's says less than `size`). */
  declaredSize?: number;
}

/** A zip of deflated entries, written by hand so its headers can lie. */
function zip(entries: ZipEntry[]): Buffer {
  const locals: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = Buffer.from(e.name);
    const declared = e.declaredSize ?? e.size;
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(8, 8);
    local.writeUInt32LE(e.crc, 14);
    local.writeUInt32LE(e.data.length, 18);
    local.writeUInt32LE(declared, 22);
    local.writeUInt16LE(name.length, 26);
    const cd = Buffer.alloc(46);
    cd.writeUInt32LE(0x02014b50, 0);
    cd.writeUInt16LE(20, 4);
    cd.writeUInt16LE(20, 6);
    cd.writeUInt16LE(8, 10);
    cd.writeUInt32LE(e.crc, 16);
    cd.writeUInt32LE(e.data.length, 20);
    cd.writeUInt32LE(declared, 24);
    cd.writeUInt16LE(name.length, 28);
    cd.writeUInt32LE(offset, 42);
    locals.push(local, name, e.data);
    central.push(cd, name);
    offset += local.length + name.length + e.data.length;
  }
  const cdBytes = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(cdBytes.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, cdBytes, end]);
}

const deflated = (text: string | Buffer): ZipEntry['data'] =>
  zlib.deflateRawSync(text, { level: 9, finishFlush: zlib.constants.Z_SYNC_FLUSH });

const entry = (name: string, text: string): ZipEntry => ({
  name,
  data: Buffer.concat([deflated(text), zlib.deflateRawSync(Buffer.alloc(0))]),
  crc: zlib.crc32(text),
  size: Buffer.byteLength(text),
});

const CONTENT_TYPES =
  '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>';
const RELS =
  '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>';

/**
 * A DOCX whose `word/document.xml` is one paragraph of `inflatedBytes` letters (1.5 GB from
 * ~1.5 MB by default): a run of 1 MB deflated once and repeated (each copy refers only to
 * itself, so the stream stays valid), with its true CRC. `declaredSize` makes the headers lie
 * about what the part inflates to.
 */
export function docxBomb(opts: { inflatedBytes?: number; declaredSize?: number } = {}): Buffer {
  const piece = Buffer.alloc(1024 * 1024, 'a');
  const copies = Math.max(1, Math.round((opts.inflatedBytes ?? 1536 * 1024 * 1024) / piece.length));
  const head =
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>';
  const tail = '</w:t></w:r></w:p></w:body></w:document>';
  const block = deflated(piece);
  let crc = zlib.crc32(head);
  for (let i = 0; i < copies; i++) crc = zlib.crc32(piece, crc);
  crc = zlib.crc32(tail, crc);
  const data = Buffer.concat([
    deflated(head),
    ...Array.from({ length: copies }, () => block),
    deflated(tail),
    zlib.deflateRawSync(Buffer.alloc(0)),
  ]);
  const size = head.length + copies * piece.length + tail.length;
  return zip([
    entry('[Content_Types].xml', CONTENT_TYPES),
    entry('_rels/.rels', RELS),
    { name: 'word/document.xml', data, crc: crc >>> 0, size, declaredSize: opts.declaredSize },
  ]);
}
