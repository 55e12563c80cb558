import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { ServerDeps } from '../../context.js';
import { AppError, appError } from '../../errors/index.js';
import type { RunExecution, RunExecutor, RunOutcome, RunRecord } from '../../runs/index.js';
import { runStore } from '../../runs/index.js';
import type { StorageFileDto } from '../storage/schema.js';
import { isUuid, StorageService } from '../storage/service.js';
import { ResumeMismatchError } from './document-chunks.js';
import { documentPool, WorkerStartError } from './document-pool.js';
import { MAX_FILE_BYTES } from './documents.js';
import { documentKind, ExtractionError } from './extract.js';
import { takeHead } from './first-bytes.js';
import { HEAD_BYTES, HEAD_KINDS } from './inspect.js';
import { RagService } from './service.js';

/** The run kind that indexes a storage file in the background. */
export const RAG_INDEX_KIND = 'rag_index' as const;
/** The metered endpoint of background indexing (usage records, credit holds). */
export const RAG_INDEX_ENDPOINT = '/workspaces/{workspaceId}/storage/files/{fileId}/index';

/** What a run of kind `rag_index` carries in `input`. */
interface IndexInput {
  documentId: string;
  storageFileId: string;
  requestId: string;
  apiKeyId: string | null;
}

/** Its checkpoint: how far the indexing got, for the next execution to continue. */
interface IndexState {
  storageKey: string;
  model: string | null;
  chunks: number;
  lastHash: string;
}

export interface IndexRequestResult {
  file: StorageFileDto;
  documentId: string;
  runId: string;
}

const serialKey = (documentId: string) => `rag-document:${documentId}`;

/** The error of a document whose indexing run an operator cancelled (`pnpm cli jobs cancel`). */
export const OPERATOR_CANCEL_ERROR = 'Cancelled by an operator';

/**
 * A cancelled indexing run's document: `failed` with `Cancelled by an operator` unless it had
 * already ended, and no chunks left while it stays so (chunks a worker stored before it saw
 * the cancel included). Safe to run more than once; a document queued again meanwhile (a new
 * indexing request) is left to its new run.
 */
export async function markIndexCancelled(em: EntityManager, documentId: string): Promise<void> {
  const rows = await em.execute<{ storage_file_id: string | null }[]>(
    `update rag_documents set status = 'failed', error = ?, chunk_count = 0, updated_at = now()
     where id = ? and status in ('queued', 'processing') returning storage_file_id`,
    [OPERATOR_CANCEL_ERROR, documentId],
  );
  const fileId = rows[0]?.storage_file_id;
  if (fileId) {
    await em.execute(
      `update storage_files set index_status = 'failed', is_indexed = false, updated_at = now() where id = ?`,
      [fileId],
    );
  }
  await em.execute(
    `delete from rag_chunks where document_id = ? and exists (
       select 1 from rag_documents where id = ? and status = 'failed' and error = ?)`,
    [documentId, documentId, OPERATOR_CANCEL_ERROR],
  );
}

/**
 * Queues the indexing of a storage file (docs/rag.md, "Storage files"): the file's document
 * row is created (or reused), its `indexStatus` becomes `queued`, and a run of kind
 * `rag_index` is created on the run engine. While a run of the file is still queued or
 * running, asking again answers with that run (nothing is queued twice).
 */
export async function requestIndexing(
  deps: ServerDeps,
  em: EntityManager,
  input: { workspaceId: string; fileId: string; requestId: string; apiKeyId: string | null },
): Promise<IndexRequestResult> {
  if (!isUuid(input.fileId)) throw appError('FILE_NOT_FOUND');
  const files = await em.execute<
    {
      id: string;
      filename: string;
      mime_type: string;
      size_bytes: string | number | null;
      storage_key: string | null;
    }[]
  >(
    'select id, filename, mime_type, size_bytes, storage_key from storage_files where workspace_id = ? and id = ?',
    [input.workspaceId, input.fileId],
  );
  const file = files[0];
  if (!file) throw appError('FILE_NOT_FOUND');
  const kind = documentKind(file.filename, file.mime_type);
  if (!kind.kind) {
    throw appError('UNSUPPORTED_FILE_TYPE', { type: kind.type, filename: file.filename });
  }
  const size = file.size_bytes === null ? null : Number(file.size_bytes);
  if (size !== null && size > MAX_FILE_BYTES) {
    throw appError('RAG_FILE_TOO_LARGE', { filename: file.filename });
  }
  // A bound the file's first bytes already pass (a CSV's columns, a JSON's depth): refused now.
  if (HEAD_KINDS.has(kind.kind) && file.storage_key) {
    const obj = await deps.objects.get(file.storage_key);
    if (obj) {
      const { head, body } = await takeHead(obj.body, HEAD_BYTES);
      body.destroy();
      obj.body.destroy();
      const early = await documentPool(deps).inspect({
        workspaceId: input.workspaceId,
        kind: kind.kind,
        limits: deps.config.documents.limits,
        head,
      });
      if (early) throw appError('DOCUMENT_LIMIT_EXCEEDED', { limit: early.message });
    }
  }
  const rag = new RagService(deps, em);
  await rag.provision(input.workspaceId);

  const { documentId, runId, created } = await em.transactional(async (tx) => {
    // One document per storage file (unique index): made here, or taken over (and locked).
    const docs = await tx.execute<{ id: string; status: string }[]>(
      `insert into rag_documents (id, workspace_id, storage_file_id, name, mime_type, size_bytes, storage_key, status, origin)
       values (?, ?, ?, ?, ?, ?, ?, 'queued', 'storage')
       on conflict (storage_file_id) where storage_file_id is not null do update
         set name = excluded.name, mime_type = excluded.mime_type, size_bytes = excluded.size_bytes,
             storage_key = excluded.storage_key, updated_at = now()
       returning id, status`,
      [randomUUID(), input.workspaceId, file.id, file.filename, kind.mime, size, file.storage_key],
    );
    const doc = docs[0] as { id: string; status: string };
    const docId = doc.id;
    // Still to be indexed by a live run: that run. (A run whose document is already ready or
    // failed is only finishing: a new run follows it, its serial key keeps them in order.)
    if (doc.status === 'queued' || doc.status === 'processing') {
      const live = await tx.execute<{ id: string }[]>(
        `select id from runs where serial_key = ? and status in ('pending', 'running') order by created_at limit 1`,
        [serialKey(docId)],
      );
      if (live[0]) return { documentId: docId, runId: live[0].id, created: false };
    }
    await tx.execute(
      `update rag_documents set status = 'queued', error = null, updated_at = now() where id = ?`,
      [docId],
    );
    await tx.execute(
      `update storage_files set index_status = 'queued', is_indexed = false, updated_at = now() where id = ?`,
      [file.id],
    );
    const run = await runStore.insertRun(tx, {
      workspaceId: input.workspaceId,
      kind: RAG_INDEX_KIND,
      serialKey: serialKey(docId),
      input: {
        documentId: docId,
        storageFileId: file.id,
        requestId: input.requestId,
        apiKeyId: input.apiKeyId,
      } satisfies IndexInput,
      // A file that kills its worker every time fails after this many (docs/run-engine.md).
      maxAttempts: deps.runs.maxAttempts(RAG_INDEX_KIND),
    });
    return { documentId: docId, runId: run.id, created: true };
  });
  // After the commit: a worker woken earlier would not have seen the run.
  if (created) await deps.runs.bus.publish({ t: 'wake' });
  const dto = await new StorageService(em, deps.objects).getFile(input.workspaceId, input.fileId);
  return { file: dto, documentId, runId };
}

/**
 * The `rag_index` executor: reads the storage file's object (local store or S3) as a stream,
 * extracts, chunks, embeds and stores it batch by batch (`RagService.ingest`), checkpointing
 * after each batch so an execution that takes over after a restart continues where the last
 * one stopped instead of embedding the document again.
 */
export function createRagIndexExecutor(deps: ServerDeps): RunExecutor {
  return {
    kind: RAG_INDEX_KIND,
    async execute(exec: RunExecution): Promise<RunOutcome> {
      const input = exec.run.input as unknown as IndexInput;
      const em = exec.em();
      const rag = new RagService(deps, em);
      const rows = await em.execute<
        { id: string; workspace_id: string; name: string; mime_type: string; storage_key: string | null }[]
      >(
        `select d.id, d.workspace_id, f.filename as name, f.mime_type, f.storage_key
         from rag_documents d join storage_files f on f.id = d.storage_file_id
         where d.id = ? and f.id = ?`,
        [input.documentId, input.storageFileId],
      );
      const doc = rows[0];
      // The file (and so its document) was deleted or replaced meanwhile: nothing to index.
      if (!doc) return { status: 'completed', payload: { documentId: input.documentId, skipped: true } };
      // A document no longer waiting for this run (an operator's cancel) is left as it is.
      if (!(await rag.setStatus(doc.id, 'processing', { from: ['queued', 'processing'] }))) {
        return { status: 'completed', payload: { documentId: doc.id, skipped: true } };
      }
      await exec.emit('index.processing', { documentId: doc.id, attempt: exec.run.attempts });
      const model = rag.embeddingModel()?.id ?? null;
      const previous = exec.run.state as IndexState | null;
      let resume =
        previous && previous.storageKey === doc.storage_key && previous.model === model && previous.chunks > 0
          ? { from: previous.chunks, lastHash: previous.lastHash }
          : undefined;
      try {
        const kind = documentKind(doc.name, doc.mime_type);
        if (!kind.kind) throw new ExtractionError(`File type ${kind.type} not supported for ${doc.name}`);
        for (;;) {
          const obj = doc.storage_key ? await deps.objects.get(doc.storage_key) : null;
          if (!obj) throw new ExtractionError('Storage key not found');
          try {
            const chunks = await rag.ingest({
              workspaceId: doc.workspace_id,
              documentId: doc.id,
              kind: kind.kind,
              body: obj.body,
              requestId: input.requestId,
              endpoint: RAG_INDEX_ENDPOINT,
              apiKeyId: input.apiKeyId,
              runId: exec.run.id,
              signal: exec.signal,
              resume,
              onBatch: async ({ chunks, lastHash }) => {
                await exec.checkpoint({
                  storageKey: doc.storage_key as string,
                  model,
                  chunks,
                  lastHash,
                } satisfies IndexState);
                await exec.emit('index.progress', { documentId: doc.id, chunks });
              },
            });
            // Not over an operator's cancel that landed while the last batch was stored.
            if (!(await rag.setStatus(doc.id, 'ready', { chunks, from: ['processing'] }))) {
              await markIndexCancelled(em, doc.id);
            }
            return { status: 'completed', payload: { documentId: doc.id, chunks } };
          } catch (err) {
            // The document no longer chunks as before the interruption: from the start.
            if (err instanceof ResumeMismatchError && resume) {
              resume = undefined;
              continue;
            }
            throw err;
          }
        }
      } catch (err) {
        if (exec.signal.aborted) {
          if (exec.signal.reason === 'cancelled') await markIndexCancelled(em, doc.id);
          throw err; // shutdown, lost lease: the next execution continues
        }
        // Not the document's fault: thrown, so the run engine retries it (backoff, max attempts).
        if (err instanceof WorkerStartError) throw err;
        const known = err instanceof ExtractionError || err instanceof AppError;
        const message = known ? err.message : 'Failed to index the document';
        if (!known) deps.log.error({ err, documentId: doc.id }, 'document indexing failed');
        await em.execute('delete from rag_chunks where document_id = ?', [doc.id]);
        await rag.setStatus(doc.id, 'failed', { error: message, chunks: 0 });
        return { status: 'failed', error: message };
      }
    },

    async failed(run: RunRecord, error: string): Promise<void> {
      const input = run.input as unknown as IndexInput;
      const em = deps.em();
      const rows = await em.execute<{ id: string }[]>(
        `select id from rag_documents where id = ? and status in ('queued', 'processing')`,
        [input.documentId],
      );
      if (!rows[0]) return;
      await em.execute('delete from rag_chunks where document_id = ?', [input.documentId]);
      await new RagService(deps, em).setStatus(input.documentId, 'failed', { error, chunks: 0 });
    },
  };
}

/** Wires background indexing into the process: the `rag_index` executor on the run engine. */
export function registerRagIndexing(deps: ServerDeps): void {
  deps.runs.register(createRagIndexExecutor(deps));
}
