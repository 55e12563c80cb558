import { z } from 'zod';
import { StorageFileSchema } from '../storage/schema.js';

const workspaceIdField = z
  .string({ error: 'workspace_id is required' })
  .trim()
  .min(1, 'workspace_id is required')
  .describe('Workspace to search: the signed-in person must be a member, otherwise 403');

export const RagQueryInput = z.object({
  query: z
    .string({ error: 'Query is required and must be a string' })
    .refine((q) => q.trim().length > 0, 'Query is required and must be a string')
    .pipe(z.string().max(8000, 'query must be 8000 characters or less')),
  workspace_id: workspaceIdField,
  options: z
    .object({
      max_sources: z.number().int().min(1).max(50).optional().describe('Default 5'),
      confidence_threshold: z
        .number()
        .min(0)
        .max(1)
        .optional()
        .describe(
          'Default 0.7. Minimum `relevance_score` of a source (0 to 1): the fused rank score divided by the best possible one. 0.7 keeps chunks found by both the full-text and the vector stage (see docs/rag.md).',
        ),
      include_metadata: z.boolean().optional().describe('Default true: each source carries `metadata`'),
      session_id: z
        .string()
        .max(200)
        .optional()
        .describe('Conversation continuity: follow-up questions see the previous turns of this id'),
    })
    .optional(),
});
export type RagQueryInput = z.infer<typeof RagQueryInput>;

export const RagSourceSchema = z
  .object({
    content: z.string().describe('The chunk of text'),
    document: z.string().describe('Document name'),
    page: z.number().describe('Page of the document (1 for documents without pages)'),
    confidence: z
      .number()
      .describe(
        '0 to 1: the larger of the share of question terms the chunk contains and its cosine similarity',
      ),
    relevance_score: z.number().describe('0 to 1: fused rank score, normalised (see docs/rag.md)'),
    metadata: z
      .object({
        document_id: z.string(),
        chunk_index: z.number(),
        mime_type: z.string(),
        full_text_rank: z.number().nullable(),
        vector_rank: z.number().nullable(),
        vector_similarity: z.number().nullable(),
        term_coverage: z.number(),
      })
      .optional()
      .describe('With `include_metadata` (default true)'),
  })
  .meta({ id: 'RagSource' });
export type RagSource = z.infer<typeof RagSourceSchema>;

export const RagQueryResultSchema = z
  .object({
    status: z.literal('success'),
    result: z.object({
      answer: z.string().describe('Generated from the sources only, citing them as [n] in `sources` order'),
      confidence: z.number().describe('0 to 1; 0 when the documents do not hold the answer'),
      sources: z.array(RagSourceSchema),
    }),
    usage: z.object({
      input_tokens: z.number(),
      output_tokens: z.number(),
      total_tokens: z.number(),
      embedding_tokens: z.number(),
      cost_usd: z.number(),
      model: z.string(),
    }),
    performance: z.object({ retrieval_ms: z.number(), generation_ms: z.number(), total_ms: z.number() }),
    workspace_id: z.string(),
    timestamp: z.string(),
  })
  .meta({ id: 'RagQueryResult' });
export type RagQueryResult = z.infer<typeof RagQueryResultSchema>;

export const RagUploadDetailSchema = z
  .object({
    filename: z.string(),
    documentId: z.string().nullable().describe('Null when the file was refused before it was stored'),
    chunks: z.number(),
    status: z.enum(['completed', 'failed']),
    error: z.string().optional().describe('Only when failed'),
  })
  .meta({ id: 'RagUploadDetail' });
export type RagUploadDetail = z.infer<typeof RagUploadDetailSchema>;

export const RagUploadResultSchema = z
  .object({
    status: z.literal('success'),
    message: z.string(),
    results: z.object({
      successful: z.number(),
      failed: z.number(),
      details: z.array(RagUploadDetailSchema),
    }),
    workspace_id: z.string(),
    timestamp: z.string(),
  })
  .meta({ id: 'RagUploadResult' });
export type RagUploadResult = z.infer<typeof RagUploadResultSchema>;

export const RagDocumentSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    mimeType: z.string(),
    sizeBytes: z.number().nullable(),
    status: z.enum(['queued', 'processing', 'ready', 'failed']),
    error: z.string().nullable(),
    chunks: z.number(),
    storageFileId: z.string().nullable(),
    origin: z
      .enum(['upload', 'storage'])
      .describe(
        '`upload`: sent through POST /rag/upload (deleting the document deletes its storage file); `storage`: an existing storage file indexed through POST /workspaces/{workspaceId}/storage/files/{fileId}/index (deleting the document keeps the file, back to `indexStatus` `none`)',
      ),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'RagDocument' });

export const ListDocumentsInput = z.object({ workspace_id: workspaceIdField });
export const DocumentRefInput = z.object({ workspace_id: workspaceIdField, documentId: z.string() });

export const IndexStorageFileInput = z.object({
  workspaceId: z.string(),
  fileId: z.string({ error: 'fileId is required' }).min(1, 'fileId is required'),
});

export const IndexStorageFileResultSchema = z
  .object({
    file: StorageFileSchema.describe(
      'The storage file, `indexStatus` `queued` (or where its indexing is now)',
    ),
    documentId: z.string().describe('The file’s document in the workspace index (GET /rag/documents)'),
    runId: z.string().describe('The run-engine run that indexes it'),
  })
  .meta({ id: 'IndexStorageFileResult' });
