import type { Uploadable } from '../resources/storage.js';

/**
 * A named file for the SDK's uploads (`storage.upload`, `rag.upload`, `storage.import`): a name,
 * an optional MIME type and content that is streamed when the request is sent, never read into
 * memory whole.
 */
export interface FileLike {
  name: string;
  /** MIME type; the server guesses it from the name's extension when absent. */
  type?: string;
  content: Uploadable;
}

/** What `toFile` takes. */
export type ToFileInput =
  | string
  | URL
  | Uint8Array
  | ArrayBuffer
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array | string>
  | Response
  | FileLike;

const baseName = (p: string) => p.split(/[\\/]/).pop() || p;

const isFileLike = (v: unknown): v is FileLike =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as FileLike).name === 'string' &&
  'content' in (v as object) &&
  (v as FileLike).content !== undefined;

/** A Node file stream (`fs.createReadStream`) carries its path. */
const streamPath = (v: object): string | undefined => {
  const p = (v as { path?: unknown }).path;
  if (typeof p === 'string') return p;
  if (p instanceof Uint8Array) return new TextDecoder().decode(p);
  return undefined;
};

/**
 * Makes a named file of a path, bytes, a `Blob`/`File`, a stream or a fetch `Response`:
 *
 * - a string or a `file:` URL is a **path** on disk (Node), streamed from there and named by its
 *   base name (to upload text, pass `Buffer.from(text)` or `new Blob([text])` with a name);
 * - a `File` keeps its name and type; a `Node` file stream (`fs.createReadStream`) its path's
 *   base name; a `Response` its `Content-Type`;
 * - bytes (`Buffer`, `Uint8Array`, `ArrayBuffer`), a `Blob`, a web `ReadableStream` or any async
 *   iterable of bytes (a Node `Readable`) need `name`.
 *
 * @param input what to upload
 * @param name the file name, with its extension (the server derives the type from it); overrides
 *   the one `input` carries
 * @param options `type`: the MIME type, when the extension does not say it
 * @throws TypeError when no name can be found, or `input` is none of the above
 */
export function toFile(input: ToFileInput, name?: string, options: { type?: string } = {}): FileLike {
  const named = (found: string | undefined, content: Uploadable, type?: string): FileLike => {
    const n = name ?? found;
    if (!n)
      throw new TypeError('toFile needs a name for bytes, blobs and streams: toFile(data, "report.pdf")');
    const t = options.type ?? (type || undefined);
    return t ? { name: n, type: t, content } : { name: n, content };
  };
  if (typeof input === 'string') return named(baseName(input), { filePath: input });
  if (input instanceof URL) {
    if (input.protocol !== 'file:') throw new TypeError('toFile takes file: URLs only; fetch others first');
    const path = decodeURIComponent(input.pathname);
    return named(baseName(path), { filePath: path });
  }
  if (input instanceof ArrayBuffer) return named(undefined, new Uint8Array(input));
  if (input instanceof Uint8Array) return named(undefined, input);
  if (typeof Response !== 'undefined' && input instanceof Response) {
    if (!input.body) throw new TypeError('toFile: the response has no body');
    const fromUrl = input.url ? baseName(new URL(input.url).pathname) : undefined;
    return named(fromUrl, input.body, input.headers.get('content-type')?.split(';')[0]);
  }
  if (typeof Blob !== 'undefined' && input instanceof Blob) {
    return named((input as Partial<File>).name || undefined, input, input.type);
  }
  if (isFileLike(input)) return named(input.name, input.content, input.type);
  if (typeof (input as ReadableStream).getReader === 'function') {
    return named(undefined, input as ReadableStream<Uint8Array>);
  }
  if (typeof input === 'object' && input !== null && Symbol.asyncIterator in input) {
    const p = streamPath(input);
    return named(p ? baseName(p) : undefined, input as AsyncIterable<Uint8Array | string>);
  }
  throw new TypeError('toFile takes a path, bytes, a Blob/File, a stream or a Response');
}
