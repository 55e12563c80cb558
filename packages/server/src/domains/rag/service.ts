import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { AppError, appError, type ErrorBody } from '../../errors/index.js';
import { cycleStart } from '../../metering/cycle.js';
import type { GenerationMeter } from '../../metering/types.js';
import type { LlmMessage, ModelInfo } from '../../providers/llm.js';
import { estimateTokens, messageChars } from '../../providers/tokens.js';
import { isUuid } from '../storage/service.js';
import { CHUNK_CHARS, type Chunk, chunkHash } from './chunk.js';
import { ResumeMismatchError } from './document-chunks.js';
import { documentPool } from './document-pool.js';
import { type DocumentKind, documentKind, ExtractionError } from './extract.js';
import type { Admission } from './fair-queue.js';
import type { RagQueryInput, RagQueryResult, RagSource } from './schema.js';
import { scopedSignal } from './scoped-signal.js';
import { type VectorIndex, vectorIndexFor } from './vector-index.js';

export const RAG_QUERY_ENDPOINT = '/rag/query';
export const RAG_UPLOAD_ENDPOINT = '/rag/upload';
/** Chunks per embeddings request and per insert. */
export const EMBED_BATCH = 64;
/** Candidates each retrieval stage hands to the fusion. */
export const STAGE_CANDIDATES = 50;
/** Reciprocal rank fusion constant (Cormack et al.): score = Σ 1 / (k + rank). */
export const RRF_K = 60;
/** `hnsw.ef_search` of the vector stage (recall measured in bench/rag). */
export const HNSW_EF_SEARCH = 100;
/** pgvector's HNSW index takes `vector` columns up to 2000 dimensions. */
const HNSW_MAX_DIMS = 2000;
/** Previous turns of a `session_id` the model sees. */
const HISTORY_TURNS = 5;
/** What the model replies when the sources do not hold the answer (replaced by NOT_FOUND_ANSWER). */
const NOT_FOUND_MARKER = 'NOT_IN_DOCUMENTS';
export const NOT_FOUND_ANSWER = 'The documents do not contain an answer to this question.';

export const MB = 1024 * 1024;
export const MAX_FILE_BYTES = 100 * MB;

export const notEnabled = () => appError('RAG_NOT_ENABLED');

/** 429 of spec 7: `quota` and `current_usage` are fields of the body, and repeated in `details`. */
export class QuotaExceededError extends AppError {
  constructor(
    readonly quota: number,
    readonly currentUsage: number,
  ) {
    super('QUOTA_EXCEEDED', { details: { quota, current_usage: currentUsage } });
  }
  override toBody(): ErrorBody {
    return { ...super.toBody(), quota: this.quota, current_usage: this.currentUsage } as ErrorBody;
  }
}

/**
 * How the vector stage searches: pgvector's HNSW index, the in-process index (`memory`, decision
 * 0034) or the exact cosine in SQL (`exact`).
 */
type VectorMode = 'pgvector' | 'memory' | 'exact';

/** Per database: whether pgvector is there, and which HNSW indexes this process has made sure of. */
const vectorSupport = new WeakMap<object, Promise<'pgvector' | 'exact'>>();
const hnswIndexes = new WeakMap<object, Map<number, Promise<void>>>();

const vectorLiteral = (v: number[]) => `[${v.join(',')}]`;
const arrayLiteral = (v: number[]) => `{${v.join(',')}}`;

function unit(v: number[]): number[] {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0)) || 1;
  return v.map((x) => x / n);
}

/** One lexeme as a `tsquery` literal (quoted: the lexeme is taken as is, no dictionary). */
const tsLexeme = (l: string) => `'${l.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;

/**
 * Full-text candidates (decision 0033): the chunks containing the question's rarest lexemes,
 * taken in ascending document frequency while their frequencies add up to at most this many
 * (always at least the rarest one). Bounds the rows the stage reads and ranks, whatever the
 * workspace's size.
 */
export const FTS_CANDIDATE_BUDGET = 2000;
/** At most this many chunks are ranked (when even the rarest lexeme is in more chunks). */
export const FTS_CANDIDATE_CAP = 2000;

/** BM25's inverse document frequency (with +1, never negative): ln(1 + (N − df + 0.5) / (df + 0.5)). */
export const idf = (n: number, df: number) => Math.log(1 + (n - df + 0.5) / (df + 0.5));

export interface FullTextPlan {
  /** The question's lexemes found in the workspace, rarest first, with their weights. */
  terms: { lexeme: string; df: number; idf: number }[];
  /** Chunks in the workspace. */
  chunks: number;
  /** Lexemes whose chunks are the candidates (a prefix of `terms`). */
  candidateTerms: number;
  /** Also the chunks containing every lexeme (the question has only common words). */
  conjunction: boolean;
}

/** Which lexemes select the candidates: rarest first, within `FTS_CANDIDATE_BUDGET`. */
export function planFullText(terms: { lexeme: string; df: number }[], chunks: number): FullTextPlan {
  const sorted = terms
    .filter((t) => t.df > 0)
    .sort((a, b) => a.df - b.df || (a.lexeme < b.lexeme ? -1 : a.lexeme > b.lexeme ? 1 : 0))
    .map((t) => ({ ...t, idf: idf(chunks, t.df) }));
  let sum = 0;
  let k = 0;
  while (k < sorted.length && sum + (sorted[k]?.df ?? 0) <= FTS_CANDIDATE_BUDGET) sum += sorted[k++]?.df ?? 0;
  const conjunction = k === 0 && sorted.length > 1;
  return { terms: sorted, chunks, candidateTerms: Math.max(k, Math.min(1, sorted.length)), conjunction };
}

/** The question's lexemes with their document frequency, and the workspace's chunk count (`''`). */
export const FULL_TEXT_STATS_SQL = `select q.l as lexeme, d.df, n.df as n
  from unnest(tsvector_to_array(to_tsvector('english'::regconfig, ?))) as q(l)
  left join rag_lexeme_df d on d.workspace_id = ? and d.lexeme = q.l
  left join rag_lexeme_df n on n.workspace_id = ? and n.lexeme = ''`;

/**
 * The ranking statement of the full-text stage for a plan (`?` placeholders), undefined when
 * no lexeme of the question occurs in the workspace. A chunk's score is the sum of the idf of
 * the distinct question lexemes it contains; ties go to `ts_rank_cd`, then the id.
 */
export function rankFullTextSql(
  workspaceId: string,
  plan: FullTextPlan,
  limit: number,
): { sql: string; params: unknown[] } | undefined {
  const { terms } = plan;
  if (terms.length === 0) return undefined;
  const any = (ts: typeof terms) => ts.map((t) => tsLexeme(t.lexeme)).join(' | ');
  const subset = `(select id from rag_chunks where workspace_id = ? and tsv @@ ?::tsquery limit ${FTS_CANDIDATE_CAP})`;
  const candidates = [subset];
  const params: unknown[] = [workspaceId, any(terms.slice(0, plan.candidateTerms))];
  if (plan.conjunction) {
    candidates.unshift(subset);
    params.unshift(workspaceId, terms.map((t) => tsLexeme(t.lexeme)).join(' & '));
  }
  const weights = terms.map(() => '(case when c.tsv @@ ?::tsquery then ?::float8 else 0 end)').join(' + ');
  return {
    sql: `select c.id::text as id, ${weights} as score, ts_rank_cd(c.tsv, ?::tsquery) as rank
      from rag_chunks c
      where c.id in (${candidates.join(' union ')})
      order by score desc, rank desc, c.id
      limit ?`,
    params: [...terms.flatMap((t) => [tsLexeme(t.lexeme), t.idf]), any(terms), ...params, limit],
  };
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

interface DocumentRow {
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
const toDocumentDto = (r: DocumentRow): DocumentDto => ({
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

export interface Candidate {
  id: string;
  /** 1-based rank in the full-text stage, if found there. */
  ftsRank?: number;
  ftsScore?: number;
  vectorRank?: number;
  similarity?: number;
  fused: number;
  relevance: number;
}

/**
 * Reciprocal rank fusion of the two stages, normalised by the best score possible (rank 1 in
 * every stage that ran): 1 = the top hit of both, 0.5 = the top hit of one stage absent from the
 * other. See decision 0024 for why the default threshold 0.7 means "found by both stages".
 */
export function fuse(
  fts: { id: string; score: number }[],
  vec: { id: string; similarity: number }[] | undefined,
): Candidate[] {
  const byId = new Map<string, Candidate>();
  const get = (id: string) => {
    let c = byId.get(id);
    if (!c) {
      c = { id, fused: 0, relevance: 0 };
      byId.set(id, c);
    }
    return c;
  };
  fts.forEach((r, i) => {
    const c = get(r.id);
    c.ftsRank = i + 1;
    c.ftsScore = r.score;
    c.fused += 1 / (RRF_K + i + 1);
  });
  vec?.forEach((r, i) => {
    const c = get(r.id);
    c.vectorRank = i + 1;
    c.similarity = r.similarity;
    c.fused += 1 / (RRF_K + i + 1);
  });
  const stages = vec ? 2 : 1;
  const best = stages / (RRF_K + 1);
  const out = [...byId.values()];
  for (const c of out) c.relevance = Math.min(1, c.fused / best);
  return out.sort((a, b) => b.fused - a.fused || (a.ftsRank ?? 1e9) - (b.ftsRank ?? 1e9));
}

/**
 * Document question answering (spec 4.12): documents are storage files of type `document`,
 * their chunks live in `rag_chunks` with a full-text vector and, when an embedding model is
 * configured, a unit-length embedding. Retrieval is hybrid (full text + vectors, fused by RRF).
 */
export class RagService {
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
  private async ensureHnsw(dims: number): Promise<void> {
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

  /**
   * Extracts, chunks, embeds and stores a document read from `body`, replacing any chunks it
   * had. Batches of `EMBED_BATCH` chunks are embedded and inserted as they fill, so memory
   * stays bounded whatever the document's size. Embeddings are metered on the credits meter.
   *
   * `resume` continues an interrupted indexing of the same object: chunks before `from` are
   * kept and not embedded again (extraction and chunking are deterministic; the chunk before
   * `from` must hash to `lastHash`, otherwise `ResumeMismatchError`). `onBatch` is told after
   * each stored batch. An aborted `signal` leaves the chunks stored so far in place.
   */
  async ingest(input: {
    workspaceId: string;
    documentId: string;
    kind: DocumentKind;
    body: Readable;
    requestId: string;
    endpoint?: string;
    apiKeyId?: string | null;
    runId?: string | null;
    signal?: AbortSignal;
    /** Past the workspace's cap in the document pool: wait (background runs) or refuse (requests). */
    admission?: Admission;
    resume?: { from: number; lastHash: string };
    onBatch?: (progress: { chunks: number; lastHash: string }) => Promise<void>;
  }): Promise<number> {
    const model = this.embeddingModel();
    let meter: GenerationMeter | undefined;
    let status = 'error';
    const from = input.resume?.from ?? 0;
    let count = from;
    try {
      if (model) {
        meter = await this.deps.metering.startGeneration({
          workspaceId: input.workspaceId,
          apiKeyId: input.apiKeyId ?? null,
          runId: input.runId ?? null,
          requestId: input.requestId,
          endpoint: input.endpoint ?? RAG_UPLOAD_ENDPOINT,
          model,
          meter: 'credits',
        });
      }
      await this.em.execute('delete from rag_chunks where document_id = ? and chunk_index >= ?', [
        input.documentId,
        from,
      ]);
      // Extracted and chunked in the document pool (decision 0040), batch by batch: each batch
      // is embedded and stored before the next is asked for.
      const batches = documentPool(this.deps).extract({
        workspaceId: input.workspaceId,
        admission: input.admission,
        kind: input.kind,
        body: input.body,
        limits: this.deps.config.documents.limits,
        batch: EMBED_BATCH,
        resume: input.resume,
        signal: input.signal,
      });
      for await (const chunks of batches) {
        input.signal?.throwIfAborted();
        await this.storeChunks(input.workspaceId, input.documentId, chunks, model, meter, input.signal);
        count += chunks.length;
        await input.onBatch?.({ chunks: count, lastHash: chunkHash(chunks.at(-1) as Chunk) });
      }
      status = 'success';
      return count;
    } catch (err) {
      input.body.destroy();
      if (input.signal?.aborted) status = 'aborted';
      else {
        await this.em
          .execute('delete from rag_chunks where document_id = ?', [input.documentId])
          .catch(() => undefined);
      }
      throw err;
    } finally {
      await meter?.finish(status);
    }
  }

  private async storeChunks(
    workspaceId: string,
    documentId: string,
    chunks: Chunk[],
    model: ModelInfo | undefined,
    meter: GenerationMeter | undefined,
    signal?: AbortSignal,
  ): Promise<void> {
    let vectors: number[][] | undefined;
    if (model) {
      const call = scopedSignal(signal);
      const res = await this.deps.llm
        .embed(
          model,
          chunks.map((c) => c.content),
          call.signal,
        )
        .finally(call.done);
      meter?.addUsage(res.usage);
      await meter?.check();
      vectors = res.vectors.map(unit);
      const dims = vectors[0]?.length;
      if (dims) await this.ensureHnsw(dims);
    }
    const values = chunks.map(() => '(?, ?, ?, ?, ?, ?::real[], ?)').join(', ');
    const params = chunks.flatMap((c, i) => {
      const v = vectors?.[i];
      return [
        documentId,
        workspaceId,
        c.index,
        c.page,
        c.content,
        v ? arrayLiteral(v) : null,
        v?.length ?? null,
      ];
    });
    await this.em.execute(
      `insert into rag_chunks (document_id, workspace_id, chunk_index, page, content, embedding, dims) values ${values}`,
      params,
    );
  }

  /**
   * Indexes a stored document: status `processing`, then `ready` with its chunk count or
   * `failed` with the reason (also on the storage file's `indexStatus`). Returns the outcome.
   */
  async indexDocument(
    workspaceId: string,
    documentId: string,
    ctx: { requestId: string; endpoint?: string; signal?: AbortSignal },
  ): Promise<DocumentDto> {
    const doc = await this.getDocument(workspaceId, documentId);
    const kind = documentKind(doc.name, doc.mime_type);
    await this.setStatus(doc.id, 'processing');
    try {
      if (!kind.kind) throw new ExtractionError(`File type ${kind.type} not supported for ${doc.name}`);
      const obj = doc.storage_key ? await this.deps.objects.get(doc.storage_key) : null;
      if (!obj) throw new ExtractionError('Storage key not found');
      const chunks = await this.ingest({
        workspaceId,
        documentId: doc.id,
        kind: kind.kind,
        body: obj.body,
        requestId: ctx.requestId,
        endpoint: ctx.endpoint,
        signal: ctx.signal,
        // A request answers at once past the workspace's cap in the pool (docs/rag.md, "Fairness").
        admission: 'refuse',
      });
      await this.setStatus(doc.id, 'ready', { chunks });
    } catch (err) {
      const message =
        err instanceof ExtractionError || err instanceof AppError
          ? err.message
          : 'Failed to index the document';
      if (!(err instanceof ExtractionError || err instanceof AppError)) {
        this.deps.log.error({ err, documentId }, 'document indexing failed');
      }
      await this.setStatus(doc.id, 'failed', { error: message, chunks: 0 });
    }
    return toDocumentDto(await this.getDocument(workspaceId, documentId));
  }

  async reindex(workspaceId: string, documentId: string, requestId: string): Promise<DocumentDto> {
    await this.getDocument(workspaceId, documentId);
    return this.indexDocument(workspaceId, documentId, { requestId, endpoint: RAG_UPLOAD_ENDPOINT });
  }

  // ---------- retrieval ----------

  /**
   * Full-text stage (decision 0033). The question's lexemes are weighted by rarity in the
   * workspace (BM25's idf, from `rag_lexeme_df`); a chunk scores the sum of the weights of the
   * distinct question lexemes it contains, ties broken by `ts_rank_cd` (proximity and
   * frequency). Only chunks containing the rarest lexemes are candidates (`planFullText`), at
   * most `FTS_CANDIDATE_CAP`: the cost is bounded by the budget, not by the workspace's size.
   */
  async fullTextStage(workspaceId: string, query: string, limit = STAGE_CANDIDATES) {
    const stats = await this.em.execute<{ lexeme: string; df: number | null; n: number | null }[]>(
      FULL_TEXT_STATS_SQL,
      [query, workspaceId, workspaceId],
    );
    const plan = planFullText(
      stats.map((r) => ({ lexeme: r.lexeme, df: Number(r.df ?? 0) })),
      Number(stats[0]?.n ?? 0),
    );
    const ranked = rankFullTextSql(workspaceId, plan, limit);
    if (!ranked) return [];
    const rows = await this.em.execute<{ id: string; score: number }[]>(ranked.sql, ranked.params);
    return rows.map((r) => ({ id: r.id, score: Number(r.score) }));
  }

  /**
   * Nearest chunks by cosine: HNSW through pgvector, the in-process index (exact, decision
   * 0034), or the exact scan over `real[]` in SQL (also for a workspace over the index's budget).
   */
  async vectorStage(
    workspaceId: string,
    vector: number[],
    limit = STAGE_CANDIDATES,
    mode?: VectorMode,
  ): Promise<{ id: string; similarity: number }[]> {
    const v = unit(vector);
    const dims = v.length;
    const use = mode ?? (await this.vectorMode());
    let rows: { id: string; similarity: number }[];
    if (use === 'memory') {
      const hits = await this.vectorIndex().search(workspaceId, v, limit);
      if (hits) return hits;
    }
    if (use === 'pgvector' && Number.isInteger(dims)) {
      rows = await this.em.transactional(async (em) => {
        await em.execute(
          `select set_config('hnsw.ef_search', '${HNSW_EF_SEARCH}', true), set_config('hnsw.iterative_scan', 'relaxed_order', true)`,
        );
        return em.execute<{ id: string; similarity: number }[]>(
          `select id::text as id, 1 - (embedding::vector(${dims}) <=> ?::vector(${dims})) as similarity
           from rag_chunks where workspace_id = ? and dims = ${dims}
           order by embedding::vector(${dims}) <=> ?::vector(${dims})
           limit ?`,
          [vectorLiteral(v), workspaceId, vectorLiteral(v), limit],
        );
      });
    } else {
      rows = await this.em.execute<{ id: string; similarity: number }[]>(
        `select c.id::text as id, (select sum(a * b) from unnest(c.embedding, ?::real[]) as t(a, b)) as similarity
         from rag_chunks c where c.workspace_id = ? and c.dims = ?
         order by similarity desc, c.id
         limit ?`,
        [arrayLiteral(v), workspaceId, dims, limit],
      );
    }
    return rows
      .map((r) => ({ id: r.id, similarity: Number(r.similarity) }))
      .sort((a, b) => b.similarity - a.similarity || Number(a.id) - Number(b.id));
  }

  /** Lexemes of the question, for the sources' coverage. */
  private async queryLexemes(query: string): Promise<string[]> {
    const rows = await this.em.execute<{ l: string[] | string | null }[]>(
      `select tsvector_to_array(to_tsvector('english'::regconfig, ?)) as l`,
      [query],
    );
    const l = rows[0]?.l;
    if (!l) return [];
    return Array.isArray(l)
      ? l
      : String(l)
          .replace(/^\{|\}$/g, '')
          .split(',')
          .filter(Boolean);
  }

  // ---------- quota ----------

  /** The workspace's monthly query quota (CLI) or the `RAG_MONTHLY_QUERY_QUOTA` default; null = unlimited. */
  async quotaStatus(workspaceId: string): Promise<{ quota: number | null; used: number; since: Date }> {
    const rows = await this.em.execute<{ q: number | null; anchor: Date | string }[]>(
      'select rag_monthly_query_quota as q, billing_cycle_anchor as anchor from workspaces where id = ?',
      [workspaceId],
    );
    const row = rows[0];
    const since = cycleStart(new Date(row?.anchor ?? Date.now()), new Date());
    const quota =
      row?.q !== null && row?.q !== undefined ? Number(row.q) : this.deps.config.rag.monthlyQueryQuota;
    const used = await this.em.execute<{ n: string | number }[]>(
      'select count(*) as n from rag_queries where workspace_id = ? and created_at >= ?',
      [workspaceId, since],
    );
    return { quota, used: Number(used[0]?.n ?? 0), since };
  }

  /**
   * Takes one query of the month's quota, atomically (the workspace row is locked while
   * counting, so concurrent queries cannot both take the last one); 429 when it is spent.
   */
  private async reserveQuery(
    workspaceId: string,
    principal: Principal,
    input: RagQueryInput,
  ): Promise<string> {
    const id = randomUUID();
    await this.em.transactional(async (em) => {
      await em.execute('select id from workspaces where id = ? for update', [workspaceId]);
      const status = await new RagService(this.deps, em).quotaStatus(workspaceId);
      if (status.quota !== null && status.used >= status.quota) {
        throw new QuotaExceededError(status.quota, status.used);
      }
      await em.execute(
        'insert into rag_queries (id, workspace_id, user_id, session_id, query, answer) values (?, ?, ?, ?, ?, ?)',
        [id, workspaceId, principal.userId ?? null, input.options?.session_id ?? null, input.query, ''],
      );
    });
    return id;
  }

  // ---------- query ----------

  /** `query` with anything unexpected reported as 500 `Failed to process query` (spec 7). */
  async queryOr500(principal: Principal, input: RagQueryInput, requestId: string): Promise<RagQueryResult> {
    try {
      return await this.query(principal, input, requestId);
    } catch (err) {
      if (err instanceof AppError) throw err;
      this.deps.log.error({ err }, 'RAG query failed');
      throw appError('RAG_QUERY_FAILED');
    }
  }

  async query(principal: Principal, input: RagQueryInput, requestId: string): Promise<RagQueryResult> {
    const t0 = performance.now();
    const workspaceId = input.workspace_id;
    await this.assertAccess(principal, workspaceId);
    await this.assertEnabled(workspaceId);
    const chatModel = this.deps.models.resolve('chat');
    const queryId = await this.reserveQuery(workspaceId, principal, input);
    const maxSources = input.options?.max_sources ?? 5;
    const threshold = input.options?.confidence_threshold ?? 0.7;
    const includeMetadata = input.options?.include_metadata ?? true;
    const sessionId = input.options?.session_id;
    let done = false;
    try {
      // Earlier turns of the conversation (oldest first): they shape the answer and, joined
      // to the question, the retrieval of a follow-up such as "and on page two?".
      const history = sessionId
        ? (
            await this.em.execute<{ query: string; answer: string }[]>(
              `select query, answer from rag_queries where workspace_id = ? and session_id = ? and id <> ? and answer <> ''
               order by created_at desc limit ${HISTORY_TURNS}`,
              [workspaceId, sessionId, queryId],
            )
          ).reverse()
        : [];
      const retrievalText = [...history.slice(-1).map((h) => h.query), input.query].join('\n');

      // The answer's hold first (issue 18): a query the balance cannot answer is refused with
      // 402 before anything is sent upstream, the query embedding included. The sources are not
      // known yet, so the prompt is sized for `maxSources` full chunks; the ratio the upstream's
      // reports show against that bound (learned per model and endpoint) brings the hold down
      // to the prompts actually sent.
      // It also holds the embedding's expected cost, which the embedding's own hold may then
      // take below zero: a query admitted is never refused at its second hold.
      const bound = messageChars(buildMessages(input.query, [], history)) + maxSources * (CHUNK_CHARS + 100);
      const embedModel = this.embeddingModel();
      const embedTokens = estimateTokens(retrievalText.length);
      const embedHold = embedModel
        ? this.deps.metering.expectedHoldMicros(embedModel, RAG_QUERY_ENDPOINT, embedTokens)
        : 0;
      const chatMeter = await this.deps.metering.startGeneration(
        { workspaceId, requestId, endpoint: RAG_QUERY_ENDPOINT, model: chatModel, meter: 'credits' },
        { inputTokens: estimateTokens(bound), extraMicros: embedHold },
      );
      let chatStatus: 'success' | 'error' | 'aborted' | undefined;
      let answer = NOT_FOUND_ANSWER;
      let found = false;
      let inputTokens = 0;
      let outputTokens = 0;
      let chatCost = 0;
      let embeddingTokens = 0;
      let embedCost = 0;
      let retrievalMs = 0;
      let t1 = 0;
      let sources: RagSource[] = [];
      try {
        // Retrieval: the query embedding (metered) and the two stages.
        let vector: number[] | undefined;
        if (embedModel) {
          const meter = await this.deps.metering.startGeneration(
            { workspaceId, requestId, endpoint: RAG_QUERY_ENDPOINT, model: embedModel, meter: 'credits' },
            { inputTokens: embedTokens, prepaidMicros: embedHold },
          );
          let status = 'error';
          try {
            const res = await this.deps.llm.embed(embedModel, [retrievalText]);
            meter.addUsage(res.usage);
            vector = res.vectors[0];
            embeddingTokens = res.usage.inputTokens;
            status = 'success';
          } finally {
            embedCost = (await meter.finish(status)).costMicros;
          }
        }
        const [fts, vec] = await Promise.all([
          this.fullTextStage(workspaceId, retrievalText),
          vector ? this.vectorStage(workspaceId, vector) : Promise.resolve(undefined),
        ]);
        // The threshold applies to the score as the answer shows it (rounded to 4 digits), so a
        // source shown with relevance_score x is kept at confidence_threshold x and dropped above.
        const fused = fuse(fts, vec)
          .filter((c) => round(c.relevance) >= threshold)
          .slice(0, maxSources);
        sources = await this.loadSources(fused, input.query, includeMetadata);
        retrievalMs = performance.now() - t0;

        // Generation from the retrieved chunks only.
        t1 = performance.now();
        if (sources.length > 0) {
          const messages = buildMessages(input.query, sources, history);
          chatStatus = 'error';
          const res = await this.deps.llm.complete({ model: chatModel, messages, temperature: 0 });
          chatMeter.addUsage(res.usage);
          inputTokens = res.usage.inputTokens;
          outputTokens = res.usage.outputTokens;
          const text = res.text.trim();
          found = text.length > 0 && !text.includes(NOT_FOUND_MARKER);
          answer = found ? text : NOT_FOUND_ANSWER;
          chatStatus = 'success';
        }
      } finally {
        // No chat call made (nothing retrieved, or the retrieval failed): the hold goes back whole.
        if (chatStatus) chatCost = (await chatMeter.finish(chatStatus)).costMicros;
        else await chatMeter.release();
      }
      const generationMs = performance.now() - t1;

      // Confidence of the answer: the mean confidence of the sources it cites (all sources when
      // it cites none); 0 when the documents do not hold the answer.
      const cited = new Set([...answer.matchAll(/\[(\d+)\]/g)].map((m) => Number(m[1])));
      const citedSources = sources.filter((_, i) => cited.has(i + 1));
      const basis = citedSources.length > 0 ? citedSources : sources;
      const confidence =
        found && basis.length > 0 ? basis.reduce((s, x) => s + x.confidence, 0) / basis.length : 0;

      await this.em.execute('update rag_queries set answer = ? where id = ?', [answer, queryId]);
      done = true;
      const costMicros = embedCost + chatCost;
      return {
        status: 'success',
        result: { answer, confidence: round(confidence), sources },
        usage: {
          input_tokens: inputTokens,
          output_tokens: outputTokens,
          total_tokens: inputTokens + outputTokens,
          embedding_tokens: embeddingTokens,
          cost_usd: costMicros / 1_000_000,
          model: chatModel.id,
        },
        performance: {
          retrieval_ms: round(retrievalMs, 1),
          generation_ms: round(generationMs, 1),
          total_ms: round(performance.now() - t0, 1),
        },
        workspace_id: workspaceId,
        timestamp: new Date().toISOString(),
      };
    } finally {
      // A failed query does not count against the quota.
      if (!done)
        await this.em.execute('delete from rag_queries where id = ?', [queryId]).catch(() => undefined);
    }
  }

  private async loadSources(
    fused: Candidate[],
    query: string,
    includeMetadata: boolean,
  ): Promise<RagSource[]> {
    if (fused.length === 0) return [];
    const rows = await this.em.execute<
      {
        id: string;
        content: string;
        page: number;
        chunk_index: number;
        document_id: string;
        name: string;
        mime_type: string;
        lexemes: string[] | string;
      }[]
    >(
      `select c.id::text as id, c.content, c.page, c.chunk_index, d.id as document_id, d.name, d.mime_type,
              tsvector_to_array(c.tsv) as lexemes
       from rag_chunks c join rag_documents d on d.id = c.document_id
       where c.id in (${fused.map(() => '?').join(', ')})`,
      fused.map((c) => c.id),
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    const queryLexemes = await this.queryLexemes(query);
    const out: RagSource[] = [];
    for (const c of fused) {
      const r = byId.get(c.id);
      if (!r) continue;
      const lex = new Set(
        Array.isArray(r.lexemes)
          ? r.lexemes
          : String(r.lexemes)
              .replace(/^\{|\}$/g, '')
              .split(','),
      );
      const coverage =
        queryLexemes.length > 0 ? queryLexemes.filter((l) => lex.has(l)).length / queryLexemes.length : 0;
      const similarity = c.similarity === undefined ? 0 : Math.max(0, Math.min(1, c.similarity));
      const source: RagSource = {
        content: r.content,
        document: r.name,
        page: Number(r.page),
        confidence: round(Math.max(coverage, similarity)),
        relevance_score: round(c.relevance),
      };
      if (includeMetadata) {
        source.metadata = {
          document_id: r.document_id,
          chunk_index: Number(r.chunk_index),
          mime_type: r.mime_type,
          full_text_rank: c.ftsRank ?? null,
          vector_rank: c.vectorRank ?? null,
          vector_similarity: c.similarity === undefined ? null : round(c.similarity),
          term_coverage: round(coverage),
        };
      }
      out.push(source);
    }
    return out;
  }
}

const round = (n: number, digits = 4) => Math.round(n * 10 ** digits) / 10 ** digits;

/** The prompt: numbered sources, the rule to use only them and cite them, the honest "not found". */
export function buildMessages(
  query: string,
  sources: RagSource[],
  history: { query: string; answer: string }[],
): LlmMessage[] {
  const system =
    'You answer questions using only the numbered sources given with the question. ' +
    'Cite the sources you use with their numbers in square brackets, e.g. [1] or [2][3], right after the statement they support. ' +
    `If the sources do not contain the answer, reply exactly ${NOT_FOUND_MARKER} and nothing else. ` +
    'Never use knowledge from outside the sources.';
  const context = sources
    .map((s, i) => `[${i + 1}] ${s.document}, page ${s.page}:\n${s.content}`)
    .join('\n\n');
  const messages: LlmMessage[] = [{ role: 'system', content: system }];
  for (const h of history) {
    messages.push({ role: 'user', content: h.query }, { role: 'assistant', content: h.answer });
  }
  messages.push({ role: 'user', content: `Sources:\n\n${context}\n\nQuestion: ${query}` });
  return messages;
}

export { chunkHash, documentKind, ExtractionError, ResumeMismatchError };
