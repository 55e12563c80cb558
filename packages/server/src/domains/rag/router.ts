import { z } from 'zod';
import { keyOrSessionProcedure, router, sessionProcedure } from '../../trpc.js';
import { assertWorkspace } from '../storage/service.js';
import { requestIndexing } from './indexing.js';
import {
  DocumentRefInput,
  IndexStorageFileInput,
  IndexStorageFileResultSchema,
  ListDocumentsInput,
  RagDocumentSchema,
  RagQueryInput,
  RagQueryResultSchema,
} from './schema.js';
import { RagService } from './service.js';

const tags = ['RAG'];

/** Storage's rule (spec 5): a key or a session, then `{workspaceId}` must be the caller's (401). */
const storageProcedure = keyOrSessionProcedure.use(async ({ ctx, getRawInput, next }) => {
  const raw = (await getRawInput()) as { workspaceId?: unknown } | undefined;
  assertWorkspace(ctx.principal.workspaceId, raw?.workspaceId);
  return next();
});

export const ragRouter = router({
  query: sessionProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/rag/query',
        tags,
        protect: true,
        summary: 'Ask a question answered from the workspace documents, with sources down to the page',
        description:
          'Session only (401 `Authentication required`, also for API keys). Hybrid retrieval (full text + vectors, reciprocal rank fusion), then the chat model answers from the retrieved chunks only, citing them as `[n]` in `sources` order, or says the documents do not contain the answer. 400 `Query is required and must be a string`, `workspace_id is required`; 403 `Access denied to workspace`, `RAG service not enabled for this workspace` (before the first upload); 429 `Monthly quota exceeded` with `quota` and `current_usage`; 402 `INSUFFICIENT_CREDITS`; 500 `Failed to process query`.',
      },
    })
    .input(RagQueryInput)
    .output(RagQueryResultSchema)
    .mutation(({ ctx, input }) =>
      new RagService(ctx.deps, ctx.em).queryOr500(ctx.principal, input, ctx.requestId),
    ),

  listDocuments: sessionProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/rag/documents',
        tags,
        protect: true,
        summary: 'Documents of the workspace index with their status and chunk counts',
        description:
          'Newest first. 403 `Access denied to workspace`, `RAG service not enabled for this workspace` before the first upload.',
      },
    })
    .input(ListDocumentsInput)
    .output(z.object({ documents: z.array(RagDocumentSchema) }))
    .query(async ({ ctx, input }) => {
      const rag = new RagService(ctx.deps, ctx.em);
      await rag.assertAccess(ctx.principal, input.workspace_id);
      await rag.assertEnabled(input.workspace_id);
      return { documents: await rag.listDocuments(input.workspace_id) };
    }),

  deleteDocument: sessionProcedure
    .meta({
      openapi: {
        method: 'DELETE',
        path: '/rag/documents/{documentId}',
        tags,
        protect: true,
        summary: 'Delete a document: its chunks, its storage file and its object go with it',
        description: '404 `Document not found` (also for another workspace’s document).',
      },
    })
    .input(DocumentRefInput)
    .output(z.object({ deleted: z.literal(true) }))
    .mutation(async ({ ctx, input }) => {
      const rag = new RagService(ctx.deps, ctx.em);
      await rag.assertAccess(ctx.principal, input.workspace_id);
      await rag.deleteDocument(input.workspace_id, input.documentId);
      return { deleted: true as const };
    }),

  reindexDocument: sessionProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/rag/documents/{documentId}/reindex',
        tags,
        protect: true,
        summary:
          'Extract, chunk and embed a document again from its stored file (e.g. after changing the embedding model)',
        description:
          '404 `Document not found`. Answers with the document as it is afterwards (`failed` with `error` if it could not be read).',
      },
    })
    .input(DocumentRefInput)
    .output(RagDocumentSchema)
    .mutation(async ({ ctx, input }) => {
      const rag = new RagService(ctx.deps, ctx.em);
      await rag.assertAccess(ctx.principal, input.workspace_id);
      return rag.reindex(input.workspace_id, input.documentId, ctx.requestId);
    }),

  indexStorageFile: storageProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/workspaces/{workspaceId}/storage/files/{fileId}/index',
        tags: ['Storage', 'RAG'],
        protect: true,
        summary: 'Index a storage file for document question answering, in the background',
        description:
          'Extension: not in the interface specification. An API key or a session, like every storage endpoint (`{workspaceId}` must be the caller’s, else 401 `Unauthorized`). Answers 202 at once with the file (`indexStatus` `queued`); a run on the run engine then moves it `processing` → `ready` or `failed` (the reason is the document’s `error` in GET /rag/documents), surviving restarts. Asking again while it is queued or processing answers with the same run; asking after it ended indexes the file again. Provisions the workspace index. 400 `File type <type> not supported for <name>` (`UNSUPPORTED_FILE_TYPE`), `File <name> exceeds maximum size of 100MB` (`FILE_TOO_LARGE`), a document bound its first bytes already pass, named, e.g. `CSV record 1 has 100000 columns; the limit is 2000` (`DOCUMENT_LIMIT_EXCEEDED`); 404 `File not found`. Bounds found while indexing fail the document with the bound in its `error`.',
      },
      status: 202,
    })
    .input(IndexStorageFileInput)
    .output(IndexStorageFileResultSchema)
    .mutation(({ ctx, input }) =>
      requestIndexing(ctx.deps, ctx.em, {
        workspaceId: ctx.principal.workspaceId,
        fileId: input.fileId,
        requestId: ctx.requestId,
        apiKeyId: ctx.principal.keyId ?? null,
      }),
    ),
});
