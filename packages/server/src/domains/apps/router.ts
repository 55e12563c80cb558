import { z } from 'zod';
import { keyProcedure, router } from '../../trpc.js';
import { appProcedure } from './auth.js';
import { AppChatService, appChatDeps } from './chat.js';
import {
  AppListSchema,
  AppSchema,
  ChatMessageInput,
  ChatResponseSchema,
  CreateAppInput,
  CreateThreadInput,
  DeleteThreadResultSchema,
  ListAppsInput,
  ListMessagesInput,
  ListThreadsInput,
  MemoryStatusSchema,
  SaveMessagesInput,
  SaveMessagesResultSchema,
  ThreadEnvelopeSchema,
  ThreadListSchema,
  ThreadMessageListSchema,
  ThreadRefInput,
  UpdateAppInput,
  UpdateThreadInput,
} from './schema.js';
import { AppsService, MemoryService } from './service.js';

const APPS = ['Apps'];
const MEMORY = ['App memory'];
const appNotFound = { 401: 'Unauthorized or app not found' };
const threadErrors = { 401: 'Unauthorized or app not found', 404: 'Thread not found' };
const extension = 'Extension: the interface specification presumes apps exist; this manages them.';

export const appsRouter = router({
  create: keyProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/apps',
        tags: APPS,
        protect: true,
        summary: 'Create an app',
        description: extension,
      },
      status: 201,
    })
    .input(CreateAppInput)
    .output(z.object({ app: AppSchema }))
    .mutation(async ({ ctx, input }) => ({
      app: await new AppsService(ctx.em, ctx.principal).create(input),
    })),

  list: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/apps',
        tags: APPS,
        protect: true,
        summary: 'List apps',
        description: extension,
      },
    })
    .input(ListAppsInput)
    .output(AppListSchema)
    .query(({ ctx, input }) => new AppsService(ctx.em, ctx.principal).list(input)),

  get: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/apps/{appId}',
        tags: APPS,
        protect: true,
        summary: 'Get an app',
        description: extension,
        errorResponses: appNotFound,
      },
    })
    .input(z.object({ appId: z.string() }))
    .output(z.object({ app: AppSchema }))
    .query(async ({ ctx, input }) => ({
      app: await new AppsService(ctx.em, ctx.principal).get(input.appId),
    })),

  update: keyProcedure
    .meta({
      openapi: {
        method: 'PATCH',
        path: '/apps/{appId}',
        tags: APPS,
        protect: true,
        summary: 'Update an app (only sent fields change; controls are merged)',
        description: extension,
        errorResponses: appNotFound,
      },
    })
    .input(UpdateAppInput)
    .output(z.object({ app: AppSchema }))
    .mutation(async ({ ctx, input }) => ({
      app: await new AppsService(ctx.em, ctx.principal).update(input),
    })),

  delete: keyProcedure
    .meta({
      openapi: {
        method: 'DELETE',
        path: '/apps/{appId}',
        tags: APPS,
        protect: true,
        summary: 'Delete an app with its threads and messages',
        description: extension,
        errorResponses: appNotFound,
      },
    })
    .input(z.object({ appId: z.string() }))
    .output(z.object({ deleted: z.literal(true), id: z.string() }))
    .mutation(({ ctx, input }) => new AppsService(ctx.em, ctx.principal).delete(input.appId)),

  chat: appProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/apps/{appId}/chat/message',
        tags: APPS,
        protect: true,
        summary: 'Send a message to an app and get the reply (a new thread when threadId is omitted)',
        description:
          'Accepts a workspace API key or a widget token. Stores the user and assistant messages, debits credits (402 `Insufficient credits`).',
        errorResponses: {
          400: 'message is required',
          401: 'Unauthorized or app not found',
          402: 'Insufficient credits',
          404: 'Thread not found',
          429: 'Rate limit exceeded',
          502: 'AI model error',
          503: 'No AI model configured',
        },
      },
    })
    .input(ChatMessageInput)
    .output(ChatResponseSchema)
    .mutation(({ ctx, input }) =>
      new AppChatService(appChatDeps(ctx.deps), ctx.requestId).complete(
        ctx.principal,
        input,
        '/apps/{appId}/chat/message',
        ctx.responseHeaders,
      ),
    ),

  listThreads: appProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/apps/{appId}/memory/threads',
        tags: MEMORY,
        protect: true,
        summary: 'List threads (limit default 20, capped at 100)',
        errorResponses: appNotFound,
      },
    })
    .input(ListThreadsInput)
    .output(ThreadListSchema)
    .query(({ ctx, input }) => new MemoryService(ctx.em, ctx.principal).listThreads(input.appId, input)),

  createThread: appProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/apps/{appId}/memory/threads',
        tags: MEMORY,
        protect: true,
        summary: 'Create a thread (title default `New Thread`)',
        errorResponses: appNotFound,
      },
      status: 201,
    })
    .input(CreateThreadInput)
    .output(ThreadEnvelopeSchema)
    .mutation(async ({ ctx, input }) => ({
      data: await new MemoryService(ctx.em, ctx.principal).createThread(input.appId, input),
    })),

  getThread: appProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/apps/{appId}/memory/threads/{threadId}',
        tags: MEMORY,
        protect: true,
        summary: 'Get a thread',
        errorResponses: threadErrors,
      },
    })
    .input(ThreadRefInput)
    .output(ThreadEnvelopeSchema)
    .query(async ({ ctx, input }) => ({
      data: await new MemoryService(ctx.em, ctx.principal).getThread(input.appId, input.threadId),
    })),

  updateThread: appProcedure
    .meta({
      openapi: {
        method: 'PATCH',
        path: '/apps/{appId}/memory/threads/{threadId}',
        tags: MEMORY,
        protect: true,
        summary: 'Update a thread title or status',
        errorResponses: { 400: 'Invalid status. Must be one of: active, archived, closed', ...threadErrors },
      },
    })
    .input(UpdateThreadInput)
    .output(ThreadEnvelopeSchema)
    .mutation(async ({ ctx, input }) => ({
      data: await new MemoryService(ctx.em, ctx.principal).updateThread(input.appId, input.threadId, input),
    })),

  deleteThread: appProcedure
    .meta({
      openapi: {
        method: 'DELETE',
        path: '/apps/{appId}/memory/threads/{threadId}',
        tags: MEMORY,
        protect: true,
        summary: 'Archive a thread (never removed)',
        errorResponses: threadErrors,
      },
    })
    .input(ThreadRefInput)
    .output(DeleteThreadResultSchema)
    .mutation(({ ctx, input }) =>
      new MemoryService(ctx.em, ctx.principal).archiveThread(input.appId, input.threadId),
    ),

  listMessages: appProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/apps/{appId}/memory/threads/{threadId}/messages',
        tags: MEMORY,
        protect: true,
        summary: 'Messages of a thread in ascending sequence (limit default 50, capped at 200)',
        errorResponses: threadErrors,
      },
    })
    .input(ListMessagesInput)
    .output(ThreadMessageListSchema)
    .query(({ ctx, input }) =>
      new MemoryService(ctx.em, ctx.principal).listMessages(input.appId, input.threadId, input),
    ),

  saveMessages: appProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/apps/{appId}/memory/save-messages',
        tags: MEMORY,
        protect: true,
        summary: 'Append 1 to 100 messages to a thread without a model call',
        errorResponses: { 400: 'threadId is required', ...threadErrors },
      },
      status: 201,
    })
    .input(SaveMessagesInput)
    .output(SaveMessagesResultSchema)
    .mutation(({ ctx, input }) => new MemoryService(ctx.em, ctx.principal).saveMessages(input)),

  memoryStatus: appProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/apps/{appId}/memory/status',
        tags: MEMORY,
        protect: true,
        summary: 'Thread and message counts of an app',
        errorResponses: appNotFound,
      },
    })
    .input(z.object({ appId: z.string() }))
    .output(MemoryStatusSchema)
    .query(({ ctx, input }) => new MemoryService(ctx.em, ctx.principal).status(input.appId)),
});
