import { z } from 'zod';

export const FILE_TYPES = ['image', 'deliverable', 'document', 'file'] as const;
export const LIST_TYPES = ['all', 'images', 'deliverables', 'documents', 'files'] as const;
export const INDEX_STATUSES = ['none', 'queued', 'processing', 'ready', 'failed'] as const;

export const StorageFileSchema = z
  .object({
    id: z.string(),
    type: z.enum(FILE_TYPES),
    filename: z.string(),
    mimeType: z.string(),
    sizeBytes: z.number().nullable(),
    source: z.string().nullable().describe('Human-readable origin label'),
    sourceId: z.string().nullable().describe('App id, run id or upload id that produced the file'),
    presignedUrl: z.string().nullable().describe('Signed download URL, valid 15 minutes'),
    createdAt: z.string(),
    path: z
      .string()
      .nullable()
      .describe('Logical path (`/docs/a.md`); always set for type `file`, null for files outside the tree'),
    isIndexed: z.boolean(),
    indexStatus: z.enum(INDEX_STATUSES),
    isGitHostMirror: z.boolean(),
    externalRef: z
      .record(z.string(), z.unknown())
      .nullable()
      .describe('Repository metadata for git-host mirrors: {provider, repo, branch, commit, path}'),
  })
  .meta({ id: 'StorageFile' });
export type StorageFileDto = z.infer<typeof StorageFileSchema>;

export const StorageFolderSchema = z
  .object({ id: z.string(), name: z.string(), path: z.string() })
  .meta({ id: 'StorageFolder' });
export type StorageFolderDto = z.infer<typeof StorageFolderSchema>;

const workspaceId = z.string().describe('Must be the workspace of the API key, otherwise 401');

const limitParam = z
  .union([z.string(), z.number()])
  .optional()
  .transform((v, ctx) => {
    if (v === undefined || v === '') return 50;
    const n = Number(v);
    if (!Number.isFinite(n)) {
      ctx.addIssue({ code: 'custom', message: 'limit must be a number' });
      return z.NEVER;
    }
    return Math.min(200, Math.max(1, Math.trunc(n)));
  })
  .describe('Default 50, capped at 200');

export const ListStorageInput = z.object({
  workspaceId,
  type: z
    .enum(LIST_TYPES, { error: 'Unknown type. Must be one of: all, images, deliverables, documents, files' })
    .optional()
    .default('all'),
  limit: limitParam,
  search: z
    .string()
    .max(255, 'search must be 255 characters or less')
    .optional()
    .describe('Partial filename match'),
  cursor: z
    .string()
    .max(200, 'Invalid cursor')
    .optional()
    .describe('`nextCursor` of the previous page (same type and search): the files after it'),
});

export const StorageListSchema = z
  .object({
    files: z.array(StorageFileSchema),
    totals: z.object({
      images: z.number(),
      deliverables: z.number(),
      documents: z.number(),
      files: z.number(),
    }),
    hasMore: z.boolean(),
    nextCursor: z
      .string()
      .nullable()
      .describe('Pass as `cursor` for the next page; null on the last page (docs/storage.md)'),
  })
  .meta({ id: 'StorageList' });

const optionalText = z.string().optional();

export const MoveRenameBody = {
  action: z
    .enum(['move', 'rename'], { error: 'action must be move or rename' })
    .optional()
    .default('rename')
    .describe('`rename` (default) or `move`'),
  destFolderPath: optionalText.describe('Required for move'),
  newName: optionalText.describe('Required for rename'),
};

export const MoveRenameInput = z.object({
  workspaceId,
  fileId: z.string({ error: 'fileId is required' }).min(1, 'fileId is required'),
  ...MoveRenameBody,
});

export const DeleteFileInput = z.object({
  workspaceId,
  fileId: z.string({ error: 'fileId is required' }).min(1, 'fileId is required'),
});

export const DeletedFileSchema = z
  .object({ deleted: z.literal(true), fileId: z.string() })
  .meta({ id: 'DeletedStorageFile' });

export const FileResultSchema = z.object({ file: StorageFileSchema }).meta({ id: 'StorageFileResult' });

export const CreateFolderInput = z.object({
  workspaceId,
  folderPath: z.string({ error: 'folderPath is required' }).trim().min(1, 'folderPath is required'),
});

export const CreateFolderResultSchema = z
  .object({
    created: z.boolean().describe('false when the folder already existed (the call is idempotent)'),
    folder: StorageFolderSchema,
  })
  .meta({ id: 'CreateFolderResult' });

export const RenameFolderInput = z.object({
  workspaceId,
  folderPath: z
    .string({ error: 'folderPath and newName are required' })
    .trim()
    .min(1, 'folderPath and newName are required'),
  newName: z
    .string({ error: 'folderPath and newName are required' })
    .trim()
    .min(1, 'folderPath and newName are required'),
});

export const RenameFolderResultSchema = z
  .object({
    renamed: z.literal(true),
    oldPath: z.string(),
    folder: StorageFolderSchema,
    foldersMoved: z.number().describe('Folders whose path changed, the renamed one included'),
    filesMoved: z.number().describe('Files whose path changed'),
  })
  .meta({ id: 'RenameFolderResult' });

export const PathListingInput = z.object({
  workspaceId,
  folderPath: z.string().optional().describe('Default `/`'),
  path: z.string().optional().describe('Alias of folderPath'),
  tree: z.enum(['1', 'full'], { error: 'tree must be 1 or full' }).optional(),
  mode: z.enum(['tree'], { error: 'mode must be tree' }).optional().describe('`tree` is an alias of tree=1'),
});

export const PathListingSchema = z
  .object({ path: z.string(), folders: z.array(StorageFolderSchema), files: z.array(StorageFileSchema) })
  .meta({ id: 'PathListing' });
export const PathTreeSchema = z.object({ paths: z.array(z.string()) }).meta({ id: 'PathTree' });
export const PathTreeFullSchema = z
  .object({ folders: z.array(StorageFolderSchema), files: z.array(StorageFileSchema) })
  .meta({ id: 'PathTreeFull' });

export const ImportResultSchema = z
  .object({
    imported: z.number(),
    skipped: z.number(),
    errors: z.array(z.object({ path: z.string(), error: z.string() })),
    fileIds: z.array(z.string()),
  })
  .meta({ id: 'ImportResult' });
export type ImportResultDto = z.infer<typeof ImportResultSchema>;

export const GitHostImportInput = z.object({
  workspaceId,
  repoUrl: z.string({ error: 'repoUrl is required' }).trim().min(1, 'repoUrl is required'),
  branch: z.string().trim().max(255, 'branch must be 255 characters or less').optional(),
  pathPrefix: z.string().optional(),
});

export const GitHostImportResultSchema = ImportResultSchema.extend({
  repo: z.string().describe('owner/repo'),
  branch: z.string(),
}).meta({ id: 'GitHostImportResult' });
export type GitHostImportResultDto = z.infer<typeof GitHostImportResultSchema>;

export const ContentQuery = z.object({
  fileId: z.string().optional(),
  fileType: z.string().optional().describe('`image`, `deliverable`, `document` or `file`'),
});
