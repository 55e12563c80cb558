import { z } from 'zod';
import { keyOrSessionProcedure, router } from '../../trpc.js';
import { importFromGitHost } from './githost.js';
import {
  CreateFolderInput,
  CreateFolderResultSchema,
  DeletedFileSchema,
  DeleteFileInput,
  FileResultSchema,
  GitHostImportInput,
  GitHostImportResultSchema,
  ListStorageInput,
  MoveRenameInput,
  PathListingInput,
  PathListingSchema,
  PathTreeFullSchema,
  PathTreeSchema,
  RenameFolderInput,
  RenameFolderResultSchema,
  StorageListSchema,
} from './schema.js';
import { assertWorkspace, StorageService } from './service.js';

const BASE = '/workspaces/{workspaceId}/storage';
const tags = ['Storage'];

/**
 * A key or a session (spec 5), then `{workspaceId}` must be the caller's workspace (401
 * `Unauthorized`) before any validation.
 */
const storageProcedure = keyOrSessionProcedure.use(async ({ ctx, getRawInput, next }) => {
  const raw = (await getRawInput()) as { workspaceId?: unknown } | undefined;
  assertWorkspace(ctx.principal.workspaceId, raw?.workspaceId);
  return next({ ctx: { ...ctx, storage: new StorageService(ctx.em, ctx.deps.objects) } });
});

export const storageRouter = router({
  list: storageProcedure
    .meta({ openapi: { method: 'GET', path: BASE, tags, protect: true, summary: 'List stored files' } })
    .input(ListStorageInput)
    .output(StorageListSchema)
    .query(({ ctx, input }) =>
      ctx.storage.list(ctx.principal.workspaceId, {
        type: input.type,
        limit: input.limit,
        search: input.search,
        cursor: input.cursor,
      }),
    ),

  moveOrRename: storageProcedure
    .meta({
      openapi: {
        method: 'PATCH',
        path: `${BASE}/files/{fileId}`,
        tags,
        protect: true,
        summary: 'Move or rename a file',
        description: 'A name already taken in the destination folder gives 409 `STORAGE_PATH_CONFLICT`.',
      },
    })
    .input(MoveRenameInput)
    .output(FileResultSchema)
    .mutation(async ({ ctx, input }) => ({
      file: await ctx.storage.moveOrRename(ctx.principal.workspaceId, input),
    })),

  deleteFile: storageProcedure
    .meta({
      openapi: {
        method: 'DELETE',
        path: `${BASE}/files/{fileId}`,
        tags,
        protect: true,
        summary: 'Delete a file: its object in the store and its row',
        description:
          "Extension: not in the interface specification. 404 `File not found` for an unknown id or another workspace's file. A deleted deliverable stays listed on its run, and its download answers 404.",
      },
    })
    .input(DeleteFileInput)
    .output(DeletedFileSchema)
    .mutation(async ({ ctx, input }) => {
      await ctx.storage.deleteFile(ctx.principal.workspaceId, input.fileId);
      return { deleted: true as const, fileId: input.fileId };
    }),

  moveOrRenameByBody: storageProcedure
    .meta({
      openapi: {
        method: 'PATCH',
        path: `${BASE}/files`,
        tags,
        protect: true,
        summary: 'Move or rename a file (fileId in the body)',
      },
    })
    .input(MoveRenameInput)
    .output(FileResultSchema)
    .mutation(async ({ ctx, input }) => ({
      file: await ctx.storage.moveOrRename(ctx.principal.workspaceId, input),
    })),

  createFolder: storageProcedure
    .meta({
      openapi: { method: 'POST', path: `${BASE}/folders`, tags, protect: true, summary: 'Create a folder' },
      status: 201,
    })
    .input(CreateFolderInput)
    .output(CreateFolderResultSchema)
    .mutation(({ ctx, input }) => ctx.storage.createFolder(ctx.principal.workspaceId, input.folderPath)),

  renameFolder: storageProcedure
    .meta({
      openapi: {
        method: 'PATCH',
        path: `${BASE}/folders`,
        tags,
        protect: true,
        summary: 'Rename a folder (its subfolders and files follow)',
      },
    })
    .input(RenameFolderInput)
    .output(RenameFolderResultSchema)
    .mutation(({ ctx, input }) =>
      ctx.storage.renameFolder(ctx.principal.workspaceId, input.folderPath, input.newName),
    ),

  path: storageProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: `${BASE}/path`,
        tags,
        protect: true,
        summary:
          'List a folder: children (default), every path (tree=1 or mode=tree) or every folder and file (tree=full)',
      },
    })
    .input(PathListingInput)
    .output(z.union([PathListingSchema, PathTreeSchema, PathTreeFullSchema]))
    .query(({ ctx, input }) => {
      const form =
        input.tree === 'full' ? 'full' : input.tree === '1' || input.mode === 'tree' ? 'paths' : 'children';
      return ctx.storage.listPath(ctx.principal.workspaceId, input.folderPath ?? input.path ?? '/', form);
    }),

  importGitHost: storageProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: `${BASE}/import/githost`,
        tags,
        protect: true,
        summary: 'Import a git-host repository archive',
      },
      status: 201,
    })
    .input(GitHostImportInput)
    .output(GitHostImportResultSchema)
    .mutation(({ ctx, input }) =>
      importFromGitHost(ctx.deps, ctx.storage, {
        workspaceId: ctx.principal.workspaceId,
        repoUrl: input.repoUrl,
        branch: input.branch,
        pathPrefix: input.pathPrefix,
      }),
    ),
});
