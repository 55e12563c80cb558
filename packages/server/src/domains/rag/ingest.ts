import type { Readable } from 'node:stream';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { ServerDeps } from '../../context.js';
import { AppError } from '../../errors/index.js';
import type { GenerationMeter } from '../../metering/types.js';
import type { ModelInfo } from '../../providers/llm.js';
import { type Chunk, chunkHash } from './chunk.js';
import { documentPool } from './document-pool.js';
import { arrayLiteral, type DocumentDto, RagDocuments, toDocumentDto, unit } from './documents.js';
import { type DocumentKind, documentKind, ExtractionError } from './extract.js';
import type { Admission } from './fair-queue.js';
import { scopedSignal } from './scoped-signal.js';

export const RAG_UPLOAD_ENDPOINT = '/rag/upload';
/** Chunks per embeddings request and per insert. */
export const EMBED_BATCH = 64;

/**
 * Indexing a document: extraction in the document pool, chunking, embedding (metered, batch by
 * batch) and storing its chunks; the status of the document around it.
 */
export class RagIngest {
  constructor(
    private readonly deps: ServerDeps,
    private readonly em: EntityManager = deps.em(),
    private readonly documents: RagDocuments = new RagDocuments(deps, em),
  ) {}

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
    const model = this.documents.embeddingModel();
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
      if (dims) await this.documents.ensureHnsw(dims);
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
    const doc = await this.documents.getDocument(workspaceId, documentId);
    const kind = documentKind(doc.name, doc.mime_type);
    await this.documents.setStatus(doc.id, 'processing');
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
      await this.documents.setStatus(doc.id, 'ready', { chunks });
    } catch (err) {
      const message =
        err instanceof ExtractionError || err instanceof AppError
          ? err.message
          : 'Failed to index the document';
      if (!(err instanceof ExtractionError || err instanceof AppError)) {
        this.deps.log.error({ err, documentId }, 'document indexing failed');
      }
      await this.documents.setStatus(doc.id, 'failed', { error: message, chunks: 0 });
    }
    return toDocumentDto(await this.documents.getDocument(workspaceId, documentId));
  }

  async reindex(workspaceId: string, documentId: string, requestId: string): Promise<DocumentDto> {
    await this.documents.getDocument(workspaceId, documentId);
    return this.indexDocument(workspaceId, documentId, { requestId, endpoint: RAG_UPLOAD_ENDPOINT });
  }
}
