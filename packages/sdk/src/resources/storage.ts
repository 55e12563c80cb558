import type { AiSuite } from '../client.js';
import { APIPromise } from '../core/api-promise.js';
import { AiSuiteError } from '../core/errors.js';
import { cursorPages, PagePromise } from '../core/pagination.js';
import { type FileLike, type ToFileInput, toFile } from '../lib/to-file.js';
import type {
  CreateFolderResult,
  GitHostImportResult,
  ImportResult,
  IndexStorageFileResult,
  PathListing,
  PathTree,
  PathTreeFull,
  RenameFolderResult,
  StorageFile,
  StorageList,
} from './types.js';

export type StorageFileType = 'image' | 'deliverable' | 'document' | 'file';

export type StorageListQuery = {
  type?: 'all' | 'images' | 'deliverables' | 'documents' | 'files';
  limit?: number;
  search?: string;
  cursor?: string;
};

/**
 * What an upload can be: bytes (`Uint8Array`/`Buffer`), a `Blob`/`File`, a web
 * `ReadableStream`, any async iterable of bytes (a Node `Readable`), or — in Node — a path to
 * a file on disk (`{ filePath }`). Nothing is read into memory whole: the multipart body is
 * generated as the request is sent.
 */
export type Uploadable =
  | Uint8Array
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array | string>
  | { filePath: string };

export interface ImportFile {
  /** Relative path inside the import (`src/index.ts`); folders are kept. */
  path: string;
  content: Uploadable;
  /** MIME type; guessed from the extension by the server when absent. */
  type?: string;
}

export type ImportParams =
  | { kind?: 'folder' | 'files'; files: (ImportFile | FileLike)[]; pathPrefix?: string }
  | { kind?: 'zip'; zip: Uploadable; filename?: string; pathPrefix?: string };

interface Opts {
  signal?: AbortSignal;
}

export interface UploadOptions extends Opts {
  /** Folder to put the file in (`/reports/2026`), created when missing; default `/`. */
  folder?: string;
  /** File name (with its extension); default: the one the file carries (see `toFile`). */
  name?: string;
  /** MIME type; default: the file's, else the server guesses it from the extension. */
  type?: string;
}

/** What `storage.upload` resolves to: the import's answer and the new file's id. */
export type UploadResult = ImportResult & { fileId: string };

/** The server refused the file (its name or path); `path` is where it would have gone. */
export class StorageUploadError extends AiSuiteError {
  override name = 'StorageUploadError';
  constructor(
    message: string,
    readonly path: string,
  ) {
    super(message);
  }
}

const enc = new TextEncoder();

async function* bytesOf(content: Uploadable): AsyncGenerator<Uint8Array> {
  if (content instanceof Uint8Array) {
    yield content;
  } else if (typeof Blob !== 'undefined' && content instanceof Blob) {
    yield* bytesOf(content.stream());
  } else if (typeof (content as ReadableStream).getReader === 'function') {
    const reader = (content as ReadableStream<Uint8Array>).getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        yield value;
      }
    } finally {
      reader.releaseLock();
    }
  } else if (typeof (content as { filePath?: unknown }).filePath === 'string') {
    // A computed specifier keeps browser bundlers from trying to resolve a Node built-in:
    // file paths only make sense in Node, and the rest of the SDK runs in browsers too.
    const fs = (await import(/* @vite-ignore */ NODE_FS)) as typeof import('node:fs');
    yield* bytesOf(
      fs.createReadStream((content as { filePath: string }).filePath) as AsyncIterable<Uint8Array>,
    );
  } else {
    for await (const chunk of content as AsyncIterable<Uint8Array | string>) {
      yield typeof chunk === 'string' ? enc.encode(chunk) : chunk;
    }
  }
}

const NODE_FS = 'node:fs';

const quote = (s: string) => s.replace(/["\r\n\\]/g, (c) => encodeURIComponent(c));

/** A streamed multipart/form-data body: text fields first (the server needs them before files). */
export function multipart(
  fields: [string, string][],
  files: { field: string; filename: string; type?: string; content: Uploadable }[],
): { body: ReadableStream<Uint8Array> | Blob; contentType: string } {
  const boundary = `----aisuite${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
  const contentType = `multipart/form-data; boundary=${boundary}`;
  // Contents already in memory (a browser's File, bytes) make a Blob body: browsers send a
  // streamed request body only over HTTP/2, and a Blob has a length and can be retried.
  if (
    typeof Blob !== 'undefined' &&
    files.every((f) => f.content instanceof Uint8Array || f.content instanceof Blob)
  ) {
    const chunks: BlobPart[] = fields.map(
      ([name, value]) =>
        `--${boundary}\r\nContent-Disposition: form-data; name="${quote(name)}"\r\n\r\n${value}\r\n`,
    );
    for (const f of files) {
      chunks.push(
        `--${boundary}\r\nContent-Disposition: form-data; name="${quote(f.field)}"; filename="${quote(f.filename)}"\r\n` +
          `Content-Type: ${f.type ?? 'application/octet-stream'}\r\n\r\n`,
        f.content as Uint8Array<ArrayBuffer> | Blob,
        '\r\n',
      );
    }
    chunks.push(`--${boundary}--\r\n`);
    return { body: new Blob(chunks), contentType };
  }
  async function* parts(): AsyncGenerator<Uint8Array> {
    for (const [name, value] of fields) {
      yield enc.encode(
        `--${boundary}\r\nContent-Disposition: form-data; name="${quote(name)}"\r\n\r\n${value}\r\n`,
      );
    }
    for (const f of files) {
      yield enc.encode(
        `--${boundary}\r\nContent-Disposition: form-data; name="${quote(f.field)}"; filename="${quote(f.filename)}"\r\n` +
          `Content-Type: ${f.type ?? 'application/octet-stream'}\r\n\r\n`,
      );
      yield* bytesOf(f.content);
      yield enc.encode('\r\n');
    }
    yield enc.encode(`--${boundary}--\r\n`);
  }
  const it = parts();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await it.next();
        if (done) controller.close();
        else controller.enqueue(value);
      } catch (err) {
        controller.error(err);
      }
    },
    async cancel() {
      await it.return(undefined);
    },
  });
  return { body, contentType };
}

/**
 * Workspace storage (spec 4.10): list, read, move/rename, folders, tree, imports. The
 * workspace id in the paths is the credentials' own (`client.workspaceId()`).
 */
export class Storage {
  constructor(private readonly client: AiSuite) {}

  private base(): Promise<string> {
    return this.client.workspacePath('/storage');
  }

  private call<T>(fn: (base: string) => APIPromise<T>): APIPromise<T> {
    return this.client.inWorkspace('/storage', fn);
  }

  /** A file's bytes as a `Response` (the stored MIME type; `blob()`, `text()`, `arrayBuffer()`). */
  async content(file: Pick<StorageFile, 'id' | 'type'>, opts: Opts = {}): Promise<Response> {
    return this.client.requestRaw({
      method: 'GET',
      path: `${await this.base()}/content`,
      query: { fileId: file.id, fileType: file.type },
      ...opts,
    });
  }

  /**
   * Files, newest first: `type` (default `all`), `limit` (default 50, max 200), `search`
   * (filename), `cursor` (a page's `nextCursor`). Iterate for every file of the filter.
   */
  list(
    query: StorageListQuery = {},
    opts: Opts = {},
  ): PagePromise<StorageList, StorageFile, StorageListQuery> {
    return new PagePromise(
      (q) => this.call((b) => this.client.request({ method: 'GET', path: b, query: q, ...opts })),
      query,
      cursorPages((b) => b.files),
    );
  }

  /** Deletes a file: its object and its row. `NotFoundError` (`File not found`) otherwise. */
  delete(fileId: string, opts: Opts = {}): APIPromise<{ deleted: true; fileId: string }> {
    return this.call((b) =>
      this.client.request({ method: 'DELETE', path: `${b}/files/${encodeURIComponent(fileId)}`, ...opts }),
    );
  }

  /**
   * Indexes a file for document question answering, in the background (docs/rag.md): resolves
   * at once (202) with the file (`indexStatus` `queued`), its `documentId` and the `runId`
   * that indexes it; `indexStatus` then moves `processing` → `ready` or `failed` (see
   * `list()`, or `rag.documents.list()` for the reason). Works with an API key or a session.
   * `BadRequestError` for a type that cannot be indexed or a file over 100 MB,
   * `NotFoundError` (`File not found`).
   */
  index(fileId: string, opts: Opts = {}): APIPromise<IndexStorageFileResult> {
    return this.call((b) =>
      this.client.request({
        method: 'POST',
        path: `${b}/files/${encodeURIComponent(fileId)}/index`,
        body: {},
        ...opts,
      }),
    );
  }

  /** The raw content as a `Response` (`.text()`, `.arrayBuffer()`, `.body` stream). */
  async read(fileId: string, fileType: StorageFileType, opts: Opts = {}): Promise<Response> {
    const b = await this.base();
    return this.client.requestRaw({
      method: 'GET',
      path: `${b}/content`,
      query: { fileId, fileType },
      ...opts,
    });
  }

  /** Moves a file into a folder (created when missing); 409 `ConflictError` when the name is taken there. */
  move(fileId: string, destFolderPath: string, opts: Opts = {}): APIPromise<{ file: StorageFile }> {
    return this.call((b) =>
      this.client.request({
        method: 'PATCH',
        path: `${b}/files/${encodeURIComponent(fileId)}`,
        body: { action: 'move', destFolderPath },
        ...opts,
      }),
    );
  }

  /** Renames a file in its folder; 409 when the name is taken. */
  rename(fileId: string, newName: string, opts: Opts = {}): APIPromise<{ file: StorageFile }> {
    return this.call((b) =>
      this.client.request({
        method: 'PATCH',
        path: `${b}/files/${encodeURIComponent(fileId)}`,
        body: { action: 'rename', newName },
        ...opts,
      }),
    );
  }

  /** Creates a folder and its ancestors (idempotent: `created: false` when it existed). */
  createFolder(folderPath: string, opts: Opts = {}): APIPromise<CreateFolderResult> {
    return this.call((b) =>
      this.client.request({ method: 'POST', path: `${b}/folders`, body: { folderPath }, ...opts }),
    );
  }

  /** Renames a folder; its subfolders and files follow. */
  renameFolder(folderPath: string, newName: string, opts: Opts = {}): APIPromise<RenameFolderResult> {
    return this.call((b) =>
      this.client.request({ method: 'PATCH', path: `${b}/folders`, body: { folderPath, newName }, ...opts }),
    );
  }

  /**
   * A folder's content: `children` (default: direct folders and files), `paths` (every
   * descendant path, folders ending with `/`) or `full` (every descendant folder and file).
   */
  tree(folderPath?: string, form?: 'children', opts?: Opts): APIPromise<PathListing>;
  tree(folderPath: string | undefined, form: 'paths', opts?: Opts): APIPromise<PathTree>;
  tree(folderPath: string | undefined, form: 'full', opts?: Opts): APIPromise<PathTreeFull>;
  tree(
    folderPath = '/',
    form: 'children' | 'paths' | 'full' = 'children',
    opts: Opts = {},
  ): APIPromise<PathListing | PathTree | PathTreeFull> {
    const tree = form === 'paths' ? '1' : form === 'full' ? 'full' : undefined;
    return this.call((b) =>
      this.client.request({ method: 'GET', path: `${b}/path`, query: { folderPath, tree }, ...opts }),
    );
  }

  /**
   * Uploads one file into `folder` (created when missing), streamed; a file already at that path
   * is replaced. Resolves to the import's answer with `fileId`, the new file's id. Not retried
   * (the body is a stream).
   *
   * @param file a path (Node), bytes, a `Blob`/`File`, a stream, a `Response` or a `toFile(…)`
   *   result; bytes, blobs and streams need `options.name` (or `toFile(data, name)`)
   * @param options `folder` (default `/`), `name`, `type`, `signal`
   * @throws StorageUploadError when the server refuses the file's name or path;
   *   `APIError` 413 (`File <name> exceeds the 500 MB upload limit`) past 500 MB
   */
  upload(file: ToFileInput, options: UploadOptions = {}): APIPromise<UploadResult> {
    const { folder, name, type, ...opts } = options;
    let f: FileLike;
    try {
      f = toFile(file, name, { type });
    } catch (err) {
      return new APIPromise(Promise.reject(err));
    }
    const inner = this.import({ kind: 'files', files: [f], pathPrefix: folder }, opts);
    return new APIPromise(
      inner.withResponse().then(({ data, response }) => {
        const fileId = data.fileIds[0];
        if (!fileId) {
          const refused = data.errors[0];
          throw new StorageUploadError(refused?.error ?? 'The file was not stored', refused?.path ?? f.name);
        }
        return { data: { ...data, fileId }, response };
      }),
    );
  }

  /**
   * Imports files (relative paths keep their folders) or a zip, streamed. Files already at the
   * same path are replaced. Not retried (the body is a stream).
   *
   * @param params `files` (each `{ path, content, type? }` or a `toFile(…)` result, named by
   *   its path inside the import) or `zip`; `pathPrefix`: the folder they go under. At most 500 MB
   *   per file (413 past it); a zip's entries and uncompressed size are bounded by the server.
   */
  import(params: ImportParams, opts: Opts = {}): APIPromise<ImportResult> {
    const fields: [string, string][] = [];
    let files: { field: string; filename: string; type?: string; content: Uploadable }[];
    if ('zip' in params) {
      fields.push(['kind', 'zip']);
      files = [
        {
          field: 'file',
          filename: params.filename ?? 'import.zip',
          type: 'application/zip',
          content: params.zip,
        },
      ];
    } else {
      fields.push(['kind', params.kind ?? 'files']);
      files = params.files.map((f) => ({
        field: 'file[]',
        filename: 'path' in f ? f.path : f.name,
        type: f.type,
        content: f.content,
      }));
    }
    if (params.pathPrefix !== undefined) fields.push(['pathPrefix', params.pathPrefix]);
    return this.call((b) => {
      const { body, contentType } = multipart(fields, files);
      return this.client.request({
        method: 'POST',
        path: `${b}/import`,
        rawBody: body,
        headers: { 'content-type': contentType },
        maxRetries: 0,
        ...opts,
      });
    });
  }

  /** Imports a git-host repository (`https://github.com/owner/repo[.git][?branch=x]`). */
  importGitHost(
    params: { repoUrl: string; branch?: string; pathPrefix?: string },
    opts: Opts = {},
  ): APIPromise<GitHostImportResult> {
    return this.call((b) =>
      this.client.request({ method: 'POST', path: `${b}/import/githost`, body: params, ...opts }),
    );
  }
}
