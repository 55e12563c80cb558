import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { appError } from '../../errors/index.js';
import type { ModelInfo } from '../../providers/llm.js';
import { isUuid } from '../storage/service.js';
import { type VectorIndex, vectorIndexFor } from './vector-index.js';

/** pgvector's HNSW index takes `vector` columns up to 2000 dimensions. */
const HNSW_MAX_DIMS = 2000;

export const MB = 1024 * 1024;
export const MAX_FILE_BYTES = 100 * MB;

export const notEnabled = () => appError('RAG_NOT_ENABLED');

/**
 * How the vector stage searches: pgvector's HNSW index, the in-process index (`memory`, decision
 * 0034) or the exact cosine in SQL (`exact`).
 */
export type VectorMode = 'pgvector' | 'memory' | 'exact';

/** Per database: whether pgvector is there, and which HNSW indexes this process has made sure of. */
const vectorSupport = new WeakMap<object, Promise<'pgvector' | 'exact'>>();
const hnswIndexes = new WeakMap<object, Map<number, Promise<void>>>();

/** A vector as pgvector's literal, as a `real[]` literal, and scaled to unit length. */
export const vectorLiteral = (v: number[]) => `[${v.join(',')}]`;
export const arrayLiteral = (v: number[]) => `{${v.join(',')}}`;

export function unit(v: number[]): number[] {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0)) || 1;
  return v.map((x) => x / n);
}

export interface DocumentDto {
  id: string;
  name: string;
  mimeType: string;
  sizeBytes: number | null;
  status: 'queued' | 'processing' | 'ready' | 'failed';
  error: string | null;
  chunks: number;
  storageFileId: string | null;
  /** `upload` (POST /rag/upload) or `storage` (an existing storage file indexed in the background). */
  origin: DocumentOrigin;
  createdAt: string;
  updatedAt: string;
}

export type DocumentOrigin = 'upload' | 'storage';

export interface DocumentRow {
  id: string;
  name: string;
  mime_type: string;
  size_bytes: string | number | null;
  status: DocumentDto['status'];
  error: string | null;
  chunk_count: number;
  storage_file_id: string | null;
  storage_key: string | null;
  origin: DocumentOrigin;
  created_at: Date | string;
  updated_at: Date | string;
}

const toIso = (d: Date | string) => (d instanceof Date ? d : new Date(d)).toISOString();
export const toDocumentDto = (r: DocumentRow): DocumentDto => ({
  id: r.id,
  name: r.name,
  mimeType: r.mime_type,
  sizeBytes: r.size_bytes === null ? null : Number(r.size_bytes),
  status: r.status,
  error: r.error,
  chunks: Number(r.chunk_count),
  storageFileId: r.storage_file_id,
  origin: r.origin,
  createdAt: toIso(r.created_at),
  updatedAt: toIso(r.updated_at),
});
const DOC_COLUMNS =
  'id, name, mime_type, size_bytes, status, error, chunk_count, storage_file_id, storage_key, origin, created_at, updated_at';

/**
 * The workspace's RAG index and its documents: access, provisioning, the vector mode and the
 * HNSW indexes, document rows and their status (spec 4.12).
 */
export class RagDocuments {
  constructor(
    private readonly deps: ServerDeps,
    private readonly em: EntityManager = deps.em(),
  ) {}

  // ---------- access ----------

  /**
   * The workspace a session names in `workspace_id`: the person must be a member of it
   * (403 `Access denied to workspace` otherwise, also for ids that are not UUIDs).
   */
  async assertAccess(principal: Principal, workspaceId: string): Promise<void> {
    if (!isUuid(workspaceId)) throw appError('ACCESS_DENIED');
    if (principal.workspaceId === workspaceId && principal.via === 'session') return;
    if (!principal.userId) throw appError('ACCESS_DENIED');
    const rows = await this.em.execute<{ n: number }[]>(
      'select 1 as n from memberships where workspace_id = ? and user_id = ?',
      [workspaceId, principal.userId],
    );
    if (rows.length === 0) throw appError('ACCESS_DENIED');
  }

  async isEnabled(workspaceId: string): Promise<boolean> {
    const rows = await this.em.execute<{ n: number }[]>(
      'select 1 as n from rag_indexes where workspace_id = ?',
      [workspaceId],
    );
    return rows.length > 0;
  }

  async assertEnabled(workspaceId: string): Promise<void> {
    if (!(await this.isEnabled(workspaceId))) throw notEnabled();
  }

  /** The workspace's index: created by its first upload (spec 4.12). */
  async provision(workspaceId: string): Promise<void> {
    await this.em.execute('insert into rag_indexes (workspace_id) values (?) on conflict do nothing', [
      workspaceId,
    ]);
    await this.databaseVectorMode();
  }

  // ---------- vectors ----------

  /**
   * pgvector when the database has it (or lets us create it), else the exact fallback: logged
   * once per database.
   */
  vectorMode(): Promise<VectorMode> {
    return this.databaseVectorMode().then((db) => {
      const want = this.deps.config.rag.vectorIndex;
      if (want === 'memory') return 'memory';
      if (db === 'pgvector') return 'pgvector';
      return want === 'sql' ? 'exact' : 'memory';
    });
  }

  /** The in-process vector index of this server (one per database handle). */
  vectorIndex(): VectorIndex {
    return vectorIndexFor(this.deps.db, () => this.deps.em(), this.deps.config.rag.vectorCacheMb);
  }

  private databaseVectorMode(): Promise<'pgvector' | 'exact'> {
    const key = this.deps.db;
    let mode = vectorSupport.get(key);
    if (!mode) {
      mode = (async () => {
        const em = this.deps.em();
        try {
          await em.execute('create extension if not exists vector');
          return 'pgvector' as const;
        } catch (err) {
          this.deps.log.warn(
            { reason: (err as Error).message },
            this.deps.config.rag.vectorIndex === 'sql'
              ? 'pgvector is not available on this database: vector retrieval uses an exact cosine over real[] in SQL (RAG_VECTOR_INDEX=sql, decision 0024)'
              : 'pgvector is not available on this database: vector retrieval uses the in-process vector index (decision 0034)',
          );
          return 'exact' as const;
        }
      })();
      vectorSupport.set(key, mode);
    }
    return mode;
  }

  /**
   * The HNSW index of `dims`, made before the first chunks of that dimension are stored, only
   * where the vector stage queries it (`vectorMode()` is `pgvector`). With the in-process index
   * (`RAG_VECTOR_INDEX=memory`) nothing reads it, and keeping it up to date was most of the cost
   * of indexing a document on PGlite, growing with the table (decision 0038).
   */
  async ensureHnsw(dims: number): Promise<void> {
    if ((await this.vectorMode()) !== 'pgvector' || dims > HNSW_MAX_DIMS || !Number.isInteger(dims)) return;
    let map = hnswIndexes.get(this.deps.db);
    if (!map) {
      map = new Map();
      hnswIndexes.set(this.deps.db, map);
    }
    let made = map.get(dims);
    if (!made) {
      made = this.deps
        .em()
        .execute(
          `create index if not exists rag_chunks_hnsw_${dims} on rag_chunks using hnsw ((embedding::vector(${dims})) vector_cosine_ops) where dims = ${dims}`,
        )
        .then(() => undefined);
      map.set(dims, made);
      made.catch(() => map.delete(dims));
    }
    await made;
  }

  /** The configured embedding model, or undefined: retrieval is then full-text only. */
  embeddingModel(): ModelInfo | undefined {
    if (!this.deps.models.defaultId('embedding')) return undefined;
    return this.deps.models.resolve('embedding');
  }

  // ---------- documents ----------

  async createDocument(input: {
    workspaceId: string;
    name: string;
    mimeType: string;
    sizeBytes: number | null;
    storageFileId: string | null;
    storageKey: string | null;
    status: DocumentDto['status'];
    error?: string | null;
    origin?: DocumentOrigin;
  }): Promise<DocumentDto> {
    const rows = await this.em.execute<DocumentRow[]>(
      `insert into rag_documents (id, workspace_id, name, mime_type, size_bytes, storage_file_id, storage_key, status, error, origin)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) returning ${DOC_COLUMNS}`,
      [
        randomUUID(),
        input.workspaceId,
        input.name,
        input.mimeType,
        input.sizeBytes,
        input.storageFileId,
        input.storageKey,
        input.status,
        input.error ?? null,
        input.origin ?? 'upload',
      ],
    );
    return toDocumentDto(rows[0] as DocumentRow);
  }

  /**
   * Sets a document's status (and its storage file's). With `from`, only a document still in
   * one of those statuses changes (an operator's cancel is not overwritten). True when it did.
   */
  async setStatus(
    documentId: string,
    status: DocumentDto['status'],
    extra: { error?: string | null; chunks?: number; from?: DocumentDto['status'][] } = {},
  ): Promise<boolean> {
    const from = extra.from ?? [];
    const rows = await this.em.execute<{ storage_file_id: string | null }[]>(
      `update rag_documents set status = ?, error = ?, chunk_count = coalesce(?, chunk_count), updated_at = now()
       where id = ?${from.length ? ` and status in (${from.map(() => '?').join(', ')})` : ''}
       returning storage_file_id`,
      [status, extra.error ?? null, extra.chunks ?? null, documentId, ...from],
    );
    if (rows.length === 0) return false;
    const fileId = rows[0]?.storage_file_id;
    if (fileId) {
      await this.em.execute(
        'update storage_files set index_status = ?, is_indexed = ?, updated_at = now() where id = ?',
        [status, status === 'ready', fileId],
      );
    }
    return true;
  }

  async listDocuments(workspaceId: string): Promise<DocumentDto[]> {
    const rows = await this.em.execute<DocumentRow[]>(
      `select ${DOC_COLUMNS} from rag_documents where workspace_id = ? order by created_at desc, id`,
      [workspaceId],
    );
    return rows.map(toDocumentDto);
  }

  async getDocument(workspaceId: string, documentId: string): Promise<DocumentRow> {
    if (!isUuid(documentId)) throw appError('DOCUMENT_NOT_FOUND');
    const rows = await this.em.execute<DocumentRow[]>(
      `select ${DOC_COLUMNS} from rag_documents where workspace_id = ? and id = ?`,
      [workspaceId, documentId],
    );
    if (!rows[0]) throw appError('DOCUMENT_NOT_FOUND');
    return rows[0];
  }

  /**
   * Deletes a document with its chunks. An uploaded document takes its storage file and object
   * with it; a storage file that was indexed (origin `storage`) stays, back to `none`.
   */
  async deleteDocument(workspaceId: string, documentId: string): Promise<void> {
    const doc = await this.getDocument(workspaceId, documentId);
    await this.em.execute('delete from rag_documents where id = ?', [doc.id]);
    if (doc.origin === 'storage') {
      if (doc.storage_file_id) {
        await this.em.execute(
          `update storage_files set is_indexed = false, index_status = 'none', updated_at = now() where id = ?`,
          [doc.storage_file_id],
        );
      }
      return;
    }
    if (doc.storage_file_id) {
      await this.em.execute('delete from storage_files where id = ? and workspace_id = ?', [
        doc.storage_file_id,
        workspaceId,
      ]);
    }
    if (doc.storage_key) await this.deps.objects.delete(doc.storage_key).catch(() => undefined);
  }
}
