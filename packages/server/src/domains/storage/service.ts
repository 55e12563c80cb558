import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { EntityManager } from '@mikro-orm/postgresql';
import { AppError, appError } from '../../errors/index.js';
import type { ObjectStore } from '../../storage/object-store.js';
import type { IndexStatus, StorageFileType } from './entities.js';
import {
  ancestorsAndSelf,
  baseName,
  guessMimeType,
  joinPath,
  nameProblem,
  normalizeFolderPath,
  parentOf,
} from './paths.js';
import type { StorageFileDto, StorageFolderDto } from './schema.js';

export type { StorageFileDto, StorageFolderDto } from './schema.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (s: string) => UUID.test(s);

const LIST_TYPE_TO_FILE_TYPE: Record<string, StorageFileType | undefined> = {
  images: 'image',
  deliverables: 'deliverable',
  documents: 'document',
  files: 'file',
};

export interface CreateFileInput {
  workspaceId: string;
  type: StorageFileType;
  filename: string;
  /** Stored MIME type; guessed from the extension when absent or `application/octet-stream`. */
  mimeType?: string;
  /**
   * Folder the file goes in (`/reports/2026`), created when missing. Required for type `file`
   * (default `/`); optional for the other types (null = outside the file tree).
   */
  path?: string | null;
  source?: string | null;
  sourceId?: string | null;
  body: Buffer | Readable;
  /** Known length of a stream body, if any. */
  contentLength?: number;
  externalRef?: Record<string, unknown> | null;
  isGitHostMirror?: boolean;
  /** When a file with the same name is in the folder: `replace` its content or answer 409 (default). */
  onConflict?: 'replace' | 'error';
  signal?: AbortSignal;
}

export interface OpenedContent {
  file: StorageFileDto;
  mimeType: string;
  size: number;
  body: Readable;
}

interface FileRow {
  id: string;
  workspace_id: string;
  type: StorageFileType;
  filename: string;
  mime_type: string;
  size_bytes: string | number | null;
  folder_path: string | null;
  storage_key: string | null;
  source: string | null;
  source_id: string | null;
  is_indexed: boolean;
  index_status: IndexStatus;
  is_git_host_mirror: boolean;
  external_ref: Record<string, unknown> | string | null;
  created_at: Date | string;
}

interface FolderRow {
  id: string;
  path: string;
  name: string;
}

const FILE_COLUMNS =
  'id, workspace_id, type, filename, mime_type, size_bytes, folder_path, storage_key, source, source_id, is_indexed, index_status, is_git_host_mirror, external_ref, created_at';

/** `created_at` to the microsecond (a JS Date keeps only milliseconds). */
const CURSOR_TIME = `to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** The opaque `cursor` of the storage list: where the previous page ended. */
function encodeListCursor(c: { t: string; id: string }): string {
  return Buffer.from(JSON.stringify(c)).toString('base64url');
}

function decodeListCursor(raw: string): { t: string; id: string } {
  try {
    const c = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8')) as { t?: unknown; id?: unknown };
    if (
      typeof c.t === 'string' &&
      /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/.test(c.t) &&
      typeof c.id === 'string' &&
      isUuid(c.id)
    ) {
      return { t: c.t, id: c.id };
    }
  } catch {
    /* not ours */
  }
  throw appError('INVALID_CURSOR');
}

const escapeLike = (s: string) => s.replace(/[\\%_]/g, (c) => `\\${c}`);
const toIso = (d: Date | string) => (d instanceof Date ? d : new Date(d)).toISOString();

const isUniqueViolation = (err: unknown) => {
  const e = err as { code?: string; name?: string };
  return e?.code === '23505' || e?.name === 'UniqueConstraintViolationException';
};

/** 409 for a taken name; `x-should-retry: false` because retrying cannot help. */
export const pathConflict = (path: string) =>
  appError('STORAGE_PATH_CONFLICT', {
    path: baseName(path),
    path2: path,
    details: { path },
    headers: { 'x-should-retry': 'false' },
  });

/** `{workspaceId}` of a storage path must be the caller's workspace: 401 `Unauthorized` otherwise. */
export function assertWorkspace(principalWorkspaceId: string, pathWorkspaceId: unknown): void {
  if (typeof pathWorkspaceId !== 'string' || pathWorkspaceId !== principalWorkspaceId) {
    throw appError('UNAUTHORIZED');
  }
}

/**
 * Workspace storage: file metadata in PostgreSQL, bodies in the object store. Other domains
 * (runs, images, documents) store what they produce through `createFile` and read it back
 * with `openContent`; every method is scoped to one workspace.
 */
export class StorageService {
  constructor(
    private readonly em: EntityManager,
    private readonly objects: ObjectStore,
  ) {}

  async toDto(row: FileRow): Promise<StorageFileDto> {
    const ref = typeof row.external_ref === 'string' ? JSON.parse(row.external_ref) : row.external_ref;
    return {
      id: row.id,
      type: row.type,
      filename: row.filename,
      mimeType: row.mime_type,
      sizeBytes: row.size_bytes === null ? null : Number(row.size_bytes),
      source: row.source,
      sourceId: row.source_id,
      presignedUrl: row.storage_key
        ? await this.objects.presign(row.storage_key, { contentType: row.mime_type, filename: row.filename })
        : null,
      createdAt: toIso(row.created_at),
      path: row.folder_path === null ? null : joinPath(row.folder_path, row.filename),
      isIndexed: row.is_indexed,
      indexStatus: row.index_status,
      isGitHostMirror: row.is_git_host_mirror,
      externalRef: ref ?? null,
    };
  }

  private async findRow(workspaceId: string, fileId: string): Promise<FileRow | null> {
    if (!isUuid(fileId)) return null;
    const rows = await this.em.execute<FileRow[]>(
      `select ${FILE_COLUMNS} from storage_files where workspace_id = ? and id = ?`,
      [workspaceId, fileId],
    );
    return rows[0] ?? null;
  }

  async getFile(workspaceId: string, fileId: string): Promise<StorageFileDto> {
    const row = await this.findRow(workspaceId, fileId);
    if (!row) throw appError('FILE_NOT_FOUND');
    return this.toDto(row);
  }

  /** Creates the folder and its ancestors (no-op for those that exist). */
  async ensureFolders(workspaceId: string, folder: string): Promise<void> {
    const chain = ancestorsAndSelf(folder);
    if (chain.length === 0) return;
    const values = chain.map(() => '(?, ?, ?, ?)').join(', ');
    const params = chain.flatMap((p) => [randomUUID(), workspaceId, p, baseName(p)]);
    await this.em.execute(
      `insert into storage_folders (id, workspace_id, path, name) values ${values} on conflict (workspace_id, path) do nothing`,
      params,
    );
  }

  private async folderExists(workspaceId: string, path: string): Promise<boolean> {
    if (path === '/') return true;
    const rows = await this.em.execute<{ n: number }[]>(
      'select 1 as n from storage_folders where workspace_id = ? and path = ?',
      [workspaceId, path],
    );
    return rows.length > 0;
  }

  private async fileAt(workspaceId: string, folder: string, name: string): Promise<FileRow | null> {
    const rows = await this.em.execute<FileRow[]>(
      `select ${FILE_COLUMNS} from storage_files where workspace_id = ? and folder_path = ? and filename = ?`,
      [workspaceId, folder, name],
    );
    return rows[0] ?? null;
  }

  /** 409 when a folder sits where a file would go, or a file on a folder's path. */
  private async assertNoFolderAt(workspaceId: string, path: string): Promise<void> {
    if (await this.folderExists(workspaceId, path)) throw pathConflict(path);
  }

  /** 409 when a file sits at `path` or at any of its ancestors (a folder cannot live under a file). */
  private async assertNoFileAt(workspaceId: string, path: string): Promise<void> {
    const chain = ancestorsAndSelf(path);
    if (chain.length === 0) return;
    const fullPath =
      "case when folder_path = '/' then '/' || filename else folder_path || '/' || filename end";
    const rows = await this.em.execute<{ p: string }[]>(
      `select ${fullPath} as p from storage_files where workspace_id = ? and folder_path is not null
       and ${fullPath} in (${chain.map(() => '?').join(', ')}) limit 1`,
      [workspaceId, ...chain],
    );
    if (rows[0]) throw pathConflict(rows[0].p);
  }

  /**
   * Stores a file: the body is streamed to the object store under a fresh key, then the
   * metadata row is written. With `onConflict: 'replace'` an existing file at the same path
   * keeps its id and gets the new content (the old object is deleted afterwards).
   */
  async createFile(input: CreateFileInput): Promise<StorageFileDto> {
    const problem = nameProblem(input.filename);
    if (problem) throw appError('INVALID_FILE_NAME', { name: input.filename, problem });
    const folder =
      input.path === undefined || input.path === null
        ? input.type === 'file'
          ? '/'
          : null
        : normalizeFolderPath(input.path);
    const mimeType = guessMimeType(input.filename, input.mimeType);
    const ws = input.workspaceId;
    if (folder !== null) {
      await this.assertNoFileAt(ws, folder);
      await this.assertNoFolderAt(ws, joinPath(folder, input.filename));
      if (input.onConflict !== 'replace' && (await this.fileAt(ws, folder, input.filename))) {
        throw pathConflict(joinPath(folder, input.filename));
      }
    }
    const key = `ws/${ws}/${randomUUID()}`;
    const { size } = await this.objects.put(key, input.body, {
      contentType: mimeType,
      contentLength: input.contentLength,
      signal: input.signal,
    });
    let row: FileRow;
    let oldKey: string | null = null;
    try {
      if (folder !== null) await this.ensureFolders(ws, folder);
      const cols = [
        randomUUID(),
        ws,
        input.type,
        input.filename,
        mimeType,
        size,
        folder,
        key,
        input.source ?? null,
        input.sourceId ?? null,
        input.isGitHostMirror ?? false,
        input.externalRef ? JSON.stringify(input.externalRef) : null,
      ];
      const insert = `insert into storage_files (id, workspace_id, type, filename, mime_type, size_bytes, folder_path, storage_key, source, source_id, is_git_host_mirror, external_ref)
        values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::jsonb)`;
      if (folder !== null && input.onConflict === 'replace') {
        const rows = await this.em.execute<(FileRow & { old_key: string | null })[]>(
          `with old as (select storage_key from storage_files where workspace_id = ? and folder_path = ? and filename = ?)
           ${insert}
           on conflict (workspace_id, folder_path, filename) where folder_path is not null do update set
             type = excluded.type, mime_type = excluded.mime_type, size_bytes = excluded.size_bytes,
             storage_key = excluded.storage_key, source = excluded.source, source_id = excluded.source_id,
             is_git_host_mirror = excluded.is_git_host_mirror, external_ref = excluded.external_ref,
             is_indexed = false, index_status = 'none', updated_at = now()
           returning ${FILE_COLUMNS}, (select storage_key from old) as old_key`,
          [ws, folder, input.filename, ...cols],
        );
        row = rows[0] as FileRow;
        oldKey = rows[0]?.old_key ?? null;
        // New content, index status `none`: the document index of the old content goes
        // (its chunks cascade); index the file again to search the new content.
        if (oldKey) await this.em.execute('delete from rag_documents where storage_file_id = ?', [row.id]);
      } else {
        const rows = await this.em.execute<FileRow[]>(`${insert} returning ${FILE_COLUMNS}`, cols);
        row = rows[0] as FileRow;
      }
    } catch (err) {
      await this.objects.delete(key).catch(() => undefined);
      if (isUniqueViolation(err) && folder !== null) throw pathConflict(joinPath(folder, input.filename));
      throw err;
    }
    if (oldKey && oldKey !== key) await this.objects.delete(oldKey).catch(() => undefined);
    return this.toDto(row);
  }

  /**
   * The stored body of a file, for the content endpoint and for other domains.
   * 404 `File not found` (unknown id, other workspace, other type), `Storage key not found`
   * (no object), `Empty file` (zero bytes).
   */
  async openContent(workspaceId: string, fileId: string, fileType?: StorageFileType): Promise<OpenedContent> {
    const row = await this.findRow(workspaceId, fileId);
    if (!row || (fileType && row.type !== fileType)) throw appError('FILE_NOT_FOUND');
    if (!row.storage_key) throw appError('STORAGE_KEY_NOT_FOUND');
    const obj = await this.objects.get(row.storage_key);
    if (!obj) throw appError('STORAGE_KEY_NOT_FOUND');
    if (obj.size === 0) {
      obj.body.destroy();
      throw appError('EMPTY_FILE');
    }
    return { file: await this.toDto(row), mimeType: row.mime_type, size: obj.size, body: obj.body };
  }

  /** Reads a whole (small) file into memory: for callers that need the bytes, e.g. a model prompt. */
  async readContent(workspaceId: string, fileId: string): Promise<Buffer> {
    const opened = await this.openContent(workspaceId, fileId).catch((err: unknown) => {
      if (err instanceof AppError && err.message === 'Empty file') return null;
      throw err;
    });
    if (!opened) return Buffer.alloc(0);
    const chunks: Buffer[] = [];
    for await (const c of opened.body) chunks.push(c as Buffer);
    return Buffer.concat(chunks);
  }

  /**
   * Deletes a file: the row, then its object, in one transaction, so a store that refuses the
   * delete leaves the file as it was (and the caller sees the failure) instead of an orphaned
   * object. Other domains that keep data about a file (a RAG index) hook in here.
   */
  async deleteFile(workspaceId: string, fileId: string): Promise<void> {
    if (!isUuid(fileId)) throw appError('FILE_NOT_FOUND');
    await this.em.transactional(async (tx) => {
      const rows = await tx.execute<{ storage_key: string | null }[]>(
        'delete from storage_files where workspace_id = ? and id = ? returning storage_key',
        [workspaceId, fileId],
      );
      if (rows.length === 0) throw appError('FILE_NOT_FOUND');
      const key = rows[0]?.storage_key;
      if (key) await this.objects.delete(key);
    });
  }

  async list(
    workspaceId: string,
    q: { type: string; limit: number; search?: string; cursor?: string },
  ): Promise<{
    files: StorageFileDto[];
    totals: { images: number; deliverables: number; documents: number; files: number };
    hasMore: boolean;
    nextCursor: string | null;
  }> {
    const after = q.cursor ? decodeListCursor(q.cursor) : null;
    const where = ['workspace_id = ?'];
    const params: unknown[] = [workspaceId];
    if (q.search?.trim()) {
      where.push("filename ilike ? escape '\\'");
      params.push(`%${escapeLike(q.search.trim())}%`);
    }
    const totalsRows = await this.em.execute<{ type: StorageFileType; n: string | number }[]>(
      `select type, count(*) as n from storage_files where ${where.join(' and ')} group by type`,
      params,
    );
    const fileType = LIST_TYPE_TO_FILE_TYPE[q.type];
    if (fileType) {
      where.push('type = ?');
      params.push(fileType);
    }
    // Keyset paging on the list's order: totals stay those of the whole filter.
    if (after) {
      where.push('(created_at, id) < (?::timestamptz, ?::uuid)');
      params.push(after.t, after.id);
    }
    const rows = await this.em.execute<(FileRow & { cursor_t: string })[]>(
      `select ${FILE_COLUMNS}, ${CURSOR_TIME} as cursor_t from storage_files where ${where.join(' and ')}
       order by created_at desc, id desc limit ?`,
      [...params, q.limit + 1],
    );
    const count = (t: StorageFileType) => Number(totalsRows.find((r) => r.type === t)?.n ?? 0);
    const page = rows.slice(0, q.limit);
    const last = page.at(-1);
    return {
      nextCursor: rows.length > q.limit && last ? encodeListCursor({ t: last.cursor_t, id: last.id }) : null,
      files: await Promise.all(page.map((r) => this.toDto(r))),
      totals: {
        images: count('image'),
        deliverables: count('deliverable'),
        documents: count('document'),
        files: count('file'),
      },
      hasMore: rows.length > q.limit,
    };
  }

  /** Move (to `destFolderPath`) or rename (to `newName`); 409 when the target name is taken. */
  async moveOrRename(
    workspaceId: string,
    input: { fileId: string; action: 'move' | 'rename'; destFolderPath?: string; newName?: string },
  ): Promise<StorageFileDto> {
    if (input.action === 'move' && !input.destFolderPath?.trim()) {
      throw appError('DEST_FOLDER_REQUIRED');
    }
    if (input.action === 'rename' && !input.newName?.trim()) throw appError('NEW_NAME_REQUIRED');
    const row = await this.findRow(workspaceId, input.fileId);
    if (!row) throw appError('FILE_NOT_FOUND');
    let folder = row.folder_path ?? '/';
    let name = row.filename;
    if (input.action === 'move') folder = normalizeFolderPath(input.destFolderPath as string);
    else {
      name = (input.newName as string).trim();
      const problem = nameProblem(name);
      if (problem) throw appError('INVALID_FILE_NAME', { name, problem });
    }
    if (folder === row.folder_path && name === row.filename) return this.toDto(row);
    await this.assertNoFileAt(workspaceId, folder);
    await this.assertNoFolderAt(workspaceId, joinPath(folder, name));
    return this.em.transactional(async (tx) => {
      const svc = new StorageService(tx as EntityManager, this.objects);
      await svc.ensureFolders(workspaceId, folder);
      try {
        const rows = await tx.execute<FileRow[]>(
          `update storage_files set folder_path = ?, filename = ?, updated_at = now() where workspace_id = ? and id = ? returning ${FILE_COLUMNS}`,
          [folder, name, workspaceId, row.id],
        );
        return svc.toDto(rows[0] as FileRow);
      } catch (err) {
        if (isUniqueViolation(err)) throw pathConflict(joinPath(folder, name));
        throw err;
      }
    });
  }

  /** Creates a folder and its ancestors; idempotent (`created: false` when it existed). */
  async createFolder(
    workspaceId: string,
    folderPath: string,
  ): Promise<{ created: boolean; folder: StorageFolderDto }> {
    const path = normalizeFolderPath(folderPath);
    if (path === '/') return { created: false, folder: { id: 'root', name: '', path: '/' } };
    const existed = await this.folderExists(workspaceId, path);
    if (!existed) {
      await this.assertNoFileAt(workspaceId, path);
      await this.ensureFolders(workspaceId, path);
    }
    const rows = await this.em.execute<FolderRow[]>(
      'select id, path, name from storage_folders where workspace_id = ? and path = ?',
      [workspaceId, path],
    );
    const f = rows[0] as FolderRow;
    return { created: !existed, folder: { id: f.id, name: f.name, path: f.path } };
  }

  /** Renames a folder in place; its subfolders and files follow. */
  async renameFolder(workspaceId: string, folderPath: string, newName: string) {
    const from = normalizeFolderPath(folderPath);
    if (from === '/') throw appError('ROOT_FOLDER_RENAME');
    const name = newName.trim();
    const problem = nameProblem(name);
    if (problem) throw appError('INVALID_FOLDER_NAME', { name, problem });
    if (!(await this.folderExists(workspaceId, from))) throw appError('FOLDER_NOT_FOUND');
    const to = joinPath(parentOf(from), name);
    if (to === from) {
      const folder = await this.folderRow(workspaceId, from);
      return { renamed: true as const, oldPath: from, folder, foldersMoved: 0, filesMoved: 0 };
    }
    if (await this.folderExists(workspaceId, to)) throw pathConflict(to);
    await this.assertNoFileAt(workspaceId, to);
    return this.em.transactional(async (tx) => {
      const n = from.length;
      const folders = await tx.execute<{ id: string }[]>(
        `update storage_folders set path = ? || substr(path, ?), name = case when path = ? then ? else name end
         where workspace_id = ? and (path = ? or left(path, ?) = ?) returning id`,
        [to, n + 1, from, name, workspaceId, from, n + 1, `${from}/`],
      );
      const files = await tx.execute<{ id: string }[]>(
        `update storage_files set folder_path = ? || substr(folder_path, ?), updated_at = now()
         where workspace_id = ? and (folder_path = ? or left(folder_path, ?) = ?) returning id`,
        [to, n + 1, workspaceId, from, n + 1, `${from}/`],
      );
      const folder = await new StorageService(tx as EntityManager, this.objects).folderRow(workspaceId, to);
      return {
        renamed: true as const,
        oldPath: from,
        folder,
        foldersMoved: folders.length,
        filesMoved: files.length,
      };
    });
  }

  private async folderRow(workspaceId: string, path: string): Promise<StorageFolderDto> {
    const rows = await this.em.execute<FolderRow[]>(
      'select id, path, name from storage_folders where workspace_id = ? and path = ?',
      [workspaceId, path],
    );
    const f = rows[0] as FolderRow;
    return { id: f.id, name: f.name, path: f.path };
  }

  /**
   * The file tree under a folder: direct children (`listing`), every descendant path
   * (`paths`, folders end with `/`) or every descendant folder and file (`full`).
   */
  async listPath(
    workspaceId: string,
    folderPath: string,
    form: 'children' | 'paths' | 'full',
  ): Promise<
    | { path: string; folders: StorageFolderDto[]; files: StorageFileDto[] }
    | { paths: string[] }
    | { folders: StorageFolderDto[]; files: StorageFileDto[] }
  > {
    const path = normalizeFolderPath(folderPath);
    if (!(await this.folderExists(workspaceId, path))) throw appError('FOLDER_NOT_FOUND');
    const prefix = path === '/' ? '/' : `${path}/`;
    const n = prefix.length;
    const direct = form === 'children';
    const folders = await this.em.execute<FolderRow[]>(
      `select id, path, name from storage_folders where workspace_id = ? and left(path, ?) = ? and path <> ?
       ${direct ? "and position('/' in substr(path, ?)) = 0" : ''} order by path`,
      direct ? [workspaceId, n, prefix, path, n + 1] : [workspaceId, n, prefix, path],
    );
    const files = await this.em.execute<FileRow[]>(
      `select ${FILE_COLUMNS} from storage_files where workspace_id = ? and ${
        direct ? 'folder_path = ?' : '(folder_path = ? or left(folder_path, ?) = ?)'
      } order by folder_path, filename`,
      direct ? [workspaceId, path] : [workspaceId, path, n, prefix],
    );
    const folderDtos = folders.map((f) => ({ id: f.id, name: f.name, path: f.path }));
    if (form === 'paths') {
      const paths = [
        ...folders.map((f) => `${f.path}/`),
        ...files.map((f) => joinPath(f.folder_path as string, f.filename)),
      ].sort();
      return { paths };
    }
    const fileDtos = await Promise.all(files.map((f) => this.toDto(f)));
    return form === 'full'
      ? { folders: folderDtos, files: fileDtos }
      : { path, folders: folderDtos, files: fileDtos };
  }

  /** Sets (or clears with null) the workspace's git-host access token, used for private repositories. */
  async setGitHostToken(workspaceId: string, token: string | null): Promise<void> {
    const value = token?.trim() || null;
    const rows = await this.em.execute<{ id: string }[]>(
      'update workspaces set git_host_token = ?, updated_at = now() where id = ? returning id',
      [value, workspaceId],
    );
    if (rows.length === 0) throw appError('WORKSPACE_NOT_FOUND_NAMED', { workspace: workspaceId });
  }

  async getGitHostToken(workspaceId: string): Promise<string | null> {
    const rows = await this.em.execute<{ git_host_token: string | null }[]>(
      'select git_host_token from workspaces where id = ?',
      [workspaceId],
    );
    return rows[0]?.git_host_token ?? null;
  }
}

/** Operator entry point (CLI): `setGitHostToken(em, workspaceId, token)`. */
export async function setGitHostToken(em: EntityManager, workspaceId: string, token: string | null) {
  // The object store is not needed to set a token.
  await new StorageService(em, undefined as unknown as ObjectStore).setGitHostToken(workspaceId, token);
}
