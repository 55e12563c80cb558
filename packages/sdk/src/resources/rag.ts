import type { AiSuite } from '../client.js';
import { APIPromise } from '../core/api-promise.js';
import type { operations } from '../generated/openapi.js';
import { multipart, type Uploadable } from './storage.js';
import type { RagDocument, RagQueryResult, RagUploadResult } from './types.js';

/**
 * One document for `rag.upload`. The server decides the type by the name's extension (`.txt`,
 * `.md`, `.csv`, `.json`, `.pdf`, `.docx`), so every file needs a name:
 * - a string: a path to a file (Node), streamed from disk, named by its base name;
 * - a `File` (a `Blob` with a name);
 * - a Node file stream (`fs.createReadStream(path)`), named by its `path`;
 * - `{ name, content, type? }` where `content` is a `Buffer`/`Uint8Array`, a `Blob`, a web
 *   `ReadableStream` or any async iterable of bytes (a Node `Readable`).
 */
export type RagFileInput =
  | string
  | File
  | (AsyncIterable<Uint8Array | string> & { path: string | Uint8Array })
  | { name: string; content: Uploadable; type?: string };

export type RagQueryOptions = NonNullable<
  operations['rag-query']['requestBody']['content']['application/json']['options']
>;

export interface RagUploadParams {
  /** Workspace whose index receives the files; default: the session's current workspace. */
  workspaceId?: string;
}

export interface RagQueryParams {
  query: string;
  /** Default: the session's current workspace. */
  workspaceId?: string;
  /** `max_sources` (5), `confidence_threshold` (0.7), `include_metadata` (true), `session_id`. */
  options?: RagQueryOptions;
}

interface Opts {
  signal?: AbortSignal;
}

const baseName = (p: string) => p.split(/[\\/]/).pop() || p;

function filePart(input: RagFileInput): { filename: string; type?: string; content: Uploadable } {
  if (typeof input === 'string') return { filename: baseName(input), content: { filePath: input } };
  if (typeof Blob !== 'undefined' && input instanceof Blob) {
    const name = (input as Partial<File>).name;
    if (!name) throw new TypeError('A Blob needs a name: pass a File or { name, content: blob }');
    return { filename: name, type: input.type || undefined, content: input };
  }
  if (typeof input === 'object' && input !== null && 'content' in input && typeof input.name === 'string') {
    return {
      filename: input.name,
      type: input.type ?? (input.content instanceof Blob ? input.content.type || undefined : undefined),
      content: input.content,
    };
  }
  const path = (input as { path?: unknown }).path;
  if (
    typeof input === 'object' &&
    input !== null &&
    Symbol.asyncIterator in input &&
    (typeof path === 'string' || path instanceof Uint8Array)
  ) {
    const p = typeof path === 'string' ? path : new TextDecoder().decode(path);
    return { filename: baseName(p), content: input as AsyncIterable<Uint8Array> };
  }
  throw new TypeError(
    'Each file must be a path, a File, a file stream (fs.createReadStream) or { name, content }',
  );
}

/**
 * Documents of a workspace's index (docs/rag.md): list with status and chunk counts, delete
 * (chunks, storage file and object go with it), re-index from the stored file.
 */
export class RagDocuments {
  constructor(private readonly rag: Rag) {}

  /** Newest first; `PermissionDeniedError` before the workspace's first upload. */
  list(params: { workspaceId?: string } = {}, opts: Opts = {}): APIPromise<{ documents: RagDocument[] }> {
    return this.rag.call(params.workspaceId, (ws, client) =>
      client.request({ method: 'GET', path: '/rag/documents', query: { workspace_id: ws }, ...opts }),
    );
  }

  /** Deletes a document; `NotFoundError` (`Document not found`) for an unknown or foreign id. */
  delete(
    documentId: string,
    params: { workspaceId?: string } = {},
    opts: Opts = {},
  ): APIPromise<{ deleted: true }> {
    return this.rag.call(params.workspaceId, (ws, client) =>
      client.request({
        method: 'DELETE',
        path: `/rag/documents/${encodeURIComponent(documentId)}`,
        query: { workspace_id: ws },
        ...opts,
      }),
    );
  }

  /** Extracts, chunks and embeds again; resolves with the document afterwards (`failed` with `error` if unreadable). */
  reindex(
    documentId: string,
    params: { workspaceId?: string } = {},
    opts: Opts = {},
  ): APIPromise<RagDocument> {
    return this.rag.call(params.workspaceId, (ws, client) =>
      client.request({
        method: 'POST',
        path: `/rag/documents/${encodeURIComponent(documentId)}/reindex`,
        body: { workspace_id: ws },
        ...opts,
      }),
    );
  }
}

/**
 * Document question answering (spec 4.12): upload documents to the workspace's index and ask
 * questions answered from them with page-level sources. **Sessions only**: a client with an
 * API key gets `AuthenticationError` (401 `Authentication required`). The quota error is a
 * `RateLimitError` whose `body` carries `quota` and `current_usage`.
 */
export class Rag {
  readonly documents: RagDocuments;

  constructor(private readonly client: AiSuite) {
    this.documents = new RagDocuments(this);
  }

  /** @internal Resolves the workspace (given, or the session's) then sends. */
  call<T>(
    workspaceId: string | undefined,
    fn: (ws: string, client: AiSuite) => APIPromise<T>,
  ): APIPromise<T> {
    const ws = workspaceId !== undefined ? Promise.resolve(workspaceId) : this.client.workspaceId();
    return new APIPromise(ws.then((id) => fn(id, this.client).withResponse()));
  }

  /**
   * Uploads documents (each up to 100 MB), streamed: nothing is read into memory whole. Partial
   * success: each file has its own `{filename, documentId, chunks, status, error?}` in
   * `results.details`. When every file fails for its type or size: `BadRequestError`. Not
   * retried (the body is a stream).
   *
   * @param files at least one; each `.txt`, `.md`, `.csv`, `.json`, `.pdf` or `.docx` (by its
   *   name), at most 100 MB (`File <name> exceeds maximum size of 100MB`): a path, a `File`, a
   *   file stream, `{ name, content }` or `toFile(…)`
   * @param params `workspaceId`: default the session's workspace (`Access denied to workspace`
   *   for another)
   */
  upload(files: RagFileInput[], params: RagUploadParams = {}, opts: Opts = {}): APIPromise<RagUploadResult> {
    let parts: ReturnType<typeof filePart>[];
    try {
      parts = files.map(filePart);
    } catch (err) {
      return new APIPromise(Promise.reject(err));
    }
    return this.call(params.workspaceId, (ws, client) => {
      const { body, contentType } = multipart(
        [['workspace_id', ws]],
        parts.map((p) => ({ field: 'files[]', ...p })),
      );
      return client.request({
        method: 'POST',
        path: '/rag/upload',
        rawBody: body,
        headers: { 'content-type': contentType },
        maxRetries: 0,
        ...opts,
      });
    });
  }

  /**
   * Asks a question: `result.answer` cites `result.sources` as `[1]`, `[2]`…; each source has
   * `content`, `document`, `page`, `confidence` and `relevance_score` (0..1).
   *
   * @param params `query` (required, a non-empty string), `workspaceId`, `options`:
   *   `max_sources` (default 5), `confidence_threshold` (0 to 1, default 0.7),
   *   `include_metadata` (default true), `session_id`. `RateLimitError` (429 `Monthly quota
   *   exceeded`) past the workspace's monthly query quota.
   */
  query(params: RagQueryParams, opts: Opts = {}): APIPromise<RagQueryResult> {
    return this.call(params.workspaceId, (ws, client) =>
      client.request({
        method: 'POST',
        path: '/rag/query',
        body: {
          query: params.query,
          workspace_id: ws,
          ...(params.options ? { options: params.options } : {}),
        },
        ...opts,
      }),
    );
  }
}
