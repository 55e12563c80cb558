import { PDFDocument, StandardFonts } from 'pdf-lib';
import yazl from 'yazl';

/**
 * Real documents built for tests and benchmarks: a PDF (pdf-lib) whose pages carry the given
 * texts, and a minimal DOCX (the three parts Word needs, zipped with yazl).
 */
export async function buildPdf(pages: string[]): Promise<Buffer> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  for (const text of pages) {
    const page = doc.addPage([612, 792]);
    // Wrap at ~90 characters per line, as a real document would.
    const lines: string[] = [];
    let line = '';
    for (const word of text.split(/\s+/)) {
      if (line.length + word.length + 1 > 90) {
        lines.push(line);
        line = word;
      } else line = line ? `${line} ${word}` : word;
    }
    if (line) lines.push(line);
    lines.slice(0, 60).forEach((l, i) => {
      page.drawText(l, { x: 40, y: 750 - i * 12, size: 10, font });
    });
  }
  return Buffer.from(await doc.save());
}

const xmlEscape = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export type DocxBlock = { paragraph: string } | { table: string[][] };

export async function buildDocx(blocks: DocxBlock[]): Promise<Buffer> {
  const run = (t: string) => `<w:r><w:t xml:space="preserve">${xmlEscape(t)}</w:t></w:r>`;
  const body = blocks
    .map((b) =>
      'paragraph' in b
        ? `<w:p>${run(b.paragraph)}</w:p>`
        : `<w:tbl>${b.table
            .map((row) => `<w:tr>${row.map((c) => `<w:tc><w:p>${run(c)}</w:p></w:tc>`).join('')}</w:tr>`)
            .join('')}</w:tbl>`,
    )
    .join('');
  const zip = new yazl.ZipFile();
  zip.addBuffer(
    Buffer.from(
      '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>',
    ),
    '[Content_Types].xml',
  );
  zip.addBuffer(
    Buffer.from(
      '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>',
    ),
    '_rels/.rels',
  );
  zip.addBuffer(
    Buffer.from(
      `<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>${body}</w:body></w:document>`,
    ),
    'word/document.xml',
  );
  zip.end();
  const parts: Buffer[] = [];
  for await (const c of zip.outputStream) parts.push(c as Buffer);
  return Buffer.concat(parts);
}
