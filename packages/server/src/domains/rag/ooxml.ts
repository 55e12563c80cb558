import { Readable } from 'node:stream';
import yauzl from 'yauzl';
import yazl from 'yazl';
import { type DocumentLimits, ExtractionError, type LimitError, over } from './limits.js';

/** The parts that are XML (the document, styles, notes, relationships): the ones mammoth reads. */
const isXmlPart = (name: string) => /\.(xml|rels)$/i.test(name);

const openZip = (buffer: Buffer) =>
  new Promise<yauzl.ZipFile>((resolve, reject) =>
    yauzl.fromBuffer(buffer, { lazyEntries: true, validateEntrySizes: true }, (err, zip) =>
      err ? reject(err) : resolve(zip),
    ),
  );

const openEntry = (zip: yauzl.ZipFile, entry: yauzl.Entry) =>
  new Promise<Readable>((resolve, reject) =>
    zip.openReadStream(entry, (err, stream) => (err ? reject(err) : resolve(stream))),
  );

/** Calls `each` for every entry of the central directory, one after the other. */
async function forEachEntry(zip: yauzl.ZipFile, each: (entry: yauzl.Entry) => Promise<void>): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    zip.on('entry', (entry: yauzl.Entry) => {
      each(entry).then(
        () => zip.readEntry(),
        (err) => {
          zip.close();
          reject(err);
        },
      );
    });
    zip.on('end', () => resolve());
    zip.on('error', reject);
    zip.readEntry();
  });
}

/**
 * A copy of a DOCX that mammoth can read without any decompression bomb: the central directory
 * is read with yauzl (at most `maxOoxmlParts` entries); each XML part is stream-inflated and
 * counted as it comes, stopping at `maxOoxmlPartBytes` for the part and `maxOoxmlTotalBytes`
 * for all of them (declared sizes are only a first check: yauzl also stops a part that inflates
 * past its declared size); the copy stores those parts uncompressed (yazl) and every other part
 * (images, fonts, embedded objects) empty, as they are never read.
 */
export async function boundedDocx(buffer: Buffer, limits: DocumentLimits): Promise<Buffer> {
  let zip: yauzl.ZipFile;
  try {
    zip = await openZip(buffer);
  } catch (err) {
    throw new ExtractionError(`Invalid DOCX: ${(err as Error).message}`);
  }
  if (zip.entryCount > limits.maxOoxmlParts) {
    zip.close();
    throw over.ooxmlParts(zip.entryCount, limits);
  }
  const out = new yazl.ZipFile();
  const seen = new Set<string>();
  let total = 0;
  try {
    await forEachEntry(zip, async (entry) => {
      const name = entry.fileName;
      if (name.endsWith('/') || seen.has(name)) return;
      seen.add(name);
      if (!isXmlPart(name)) {
        out.addBuffer(Buffer.alloc(0), name, { compress: false });
        return;
      }
      if (entry.uncompressedSize > limits.maxOoxmlPartBytes) throw over.ooxmlPart(name, limits);
      if (total + entry.uncompressedSize > limits.maxOoxmlTotalBytes) throw over.ooxmlTotal(limits);
      const parts: Buffer[] = [];
      let size = 0;
      const stream = await openEntry(zip, entry);
      try {
        for await (const c of stream) {
          const piece = c as Buffer;
          size += piece.length;
          total += piece.length;
          if (size > limits.maxOoxmlPartBytes) throw over.ooxmlPart(name, limits);
          if (total > limits.maxOoxmlTotalBytes) throw over.ooxmlTotal(limits);
          parts.push(piece);
        }
      } catch (err) {
        // yauzl stops a part that inflates past the size its headers declare.
        if (/too many bytes/i.test((err as Error).message)) {
          throw new ExtractionError(
            `Invalid DOCX: part ${name} inflates to more than the ${entry.uncompressedSize} bytes it declares`,
          );
        }
        throw err;
      } finally {
        stream.destroy();
      }
      out.addBuffer(Buffer.concat(parts), name, { compress: false });
    });
  } catch (err) {
    if (err instanceof ExtractionError) throw err;
    throw new ExtractionError(`Invalid DOCX: ${(err as Error).message}`);
  }
  out.end();
  const zipped: Buffer[] = [];
  for await (const c of out.outputStream) zipped.push(c as Buffer);
  return Buffer.concat(zipped);
}

/** yauzl's reader over the last bytes of a file: reads before them fail (the caller then knows nothing). */
class TailReader extends yauzl.RandomAccessReader {
  constructor(
    private readonly tail: Buffer,
    private readonly base: number,
  ) {
    super();
  }
  override _readStreamForRange(start: number, end: number): Readable {
    if (start < this.base) {
      const r = new Readable({ read() {} });
      process.nextTick(() => r.destroy(new Error('outside the bytes kept')));
      return r;
    }
    return Readable.from([this.tail.subarray(start - this.base, end - this.base)]);
  }
}

/**
 * What the central directory of a DOCX already tells, from the file's last bytes (`tail`, of a
 * file of `size` bytes): a bound its entry count or declared sizes pass. Undefined when they
 * pass none, when the directory is not within `tail`, or when it cannot be read (the extraction
 * then says why).
 */
export async function declaredDocxOver(
  tail: Buffer,
  size: number,
  limits: DocumentLimits,
): Promise<LimitError | undefined> {
  let zip: yauzl.ZipFile;
  try {
    zip = await new Promise<yauzl.ZipFile>((resolve, reject) =>
      yauzl.fromRandomAccessReader(
        new TailReader(tail, size - tail.length),
        size,
        { lazyEntries: true, autoClose: false },
        (err, z) => (err ? reject(err) : resolve(z)),
      ),
    );
  } catch {
    return undefined;
  }
  if (zip.entryCount > limits.maxOoxmlParts) return over.ooxmlParts(zip.entryCount, limits);
  let total = 0;
  try {
    await forEachEntry(zip, async (entry) => {
      if (!isXmlPart(entry.fileName)) return;
      if (entry.uncompressedSize > limits.maxOoxmlPartBytes) throw over.ooxmlPart(entry.fileName, limits);
      total += entry.uncompressedSize;
      if (total > limits.maxOoxmlTotalBytes) throw over.ooxmlTotal(limits);
    });
    return undefined;
  } catch (err) {
    return err instanceof ExtractionError ? (err as LimitError) : undefined;
  } finally {
    zip.close();
  }
}
