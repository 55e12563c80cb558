import { z } from 'zod';

export const THREAD_STATUSES = ['active', 'archived', 'closed'] as const;
export const INVALID_THREAD_STATUS = 'Invalid status. Must be one of: active, archived, closed';

export const JsonObject = z.record(z.string(), z.unknown());

/** Per-app defaults of the chat `controls`; a request's own controls win. */
export const ControlsSchema = z
  .object({
    temperature: z
      .number({ error: 'controls.temperature must be a number' })
      .min(0, 'controls.temperature must be between 0 and 2')
      .max(2, 'controls.temperature must be between 0 and 2')
      .optional(),
    maxTokens: z
      .number({ error: 'controls.maxTokens must be a number' })
      .int('controls.maxTokens must be an integer')
      .min(1, 'controls.maxTokens must be between 1 and 32000')
      .max(32000, 'controls.maxTokens must be between 1 and 32000')
      .optional(),
    maxContextMessages: z
      .number({ error: 'controls.maxContextMessages must be a number' })
      .int('controls.maxContextMessages must be an integer')
      .min(0, 'controls.maxContextMessages must be between 0 and 100')
      .max(100, 'controls.maxContextMessages must be between 0 and 100')
      .optional(),
  })
  .meta({ id: 'AppChatControls' });
export type Controls = z.infer<typeof ControlsSchema>;

// ---------------------------------------------------------------- apps (extension CRUD)

export const AppSchema = z
  .object({
    id: z.string(),
    appType: z.literal('app'),
    name: z.string(),
    description: z.string().nullable(),
    systemPrompt: z.string().nullable(),
    model: z.string().nullable().describe('Model id; null = the default chat model'),
    controls: ControlsSchema,
    status: z.enum(['active', 'draft']),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'App' });
export type AppDto = z.infer<typeof AppSchema>;

const name = z
  .string({ error: 'name is required' })
  .trim()
  .min(1, 'name is required')
  .max(200, 'name must be 200 characters or less');
const description = z.string().max(2000, 'description must be 2000 characters or less').nullable();
const systemPrompt = z.string().max(20000, 'systemPrompt must be 20000 characters or less').nullable();
const model = z.string().min(1).max(200, 'model must be 200 characters or less').nullable();

export const CreateAppInput = z.object({
  name,
  description: description.optional(),
  systemPrompt: systemPrompt.optional(),
  model: model.optional(),
  controls: ControlsSchema.optional(),
  status: z.enum(['active', 'draft'], { error: 'status must be one of: active, draft' }).optional(),
});
export type CreateAppInput = z.infer<typeof CreateAppInput>;

export const UpdateAppInput = z.object({
  appId: z.string(),
  name: name.optional(),
  description: description.optional(),
  systemPrompt: systemPrompt.optional(),
  model: model.optional(),
  controls: ControlsSchema.optional(),
  status: z.enum(['active', 'draft'], { error: 'status must be one of: active, draft' }).optional(),
});
export type UpdateAppInput = z.infer<typeof UpdateAppInput>;

export const ListAppsInput = z.object({
  limit: z
    .number({ error: 'limit must be a number' })
    .int()
    .describe('Apps per page: default 50, clamped to 1 to 200.')
    .optional(),
  offset: z
    .number({ error: 'offset must be a number' })
    .int()
    .describe('Apps to skip: default 0.')
    .optional(),
});

export const AppListSchema = z
  .object({
    data: z.array(AppSchema),
    meta: z.object({ limit: z.number(), offset: z.number(), total: z.number() }),
  })
  .meta({ id: 'AppList' });

// ---------------------------------------------------------------- chat

const contextObject = JsonObject.optional();

export const ExternalIdentitySchema = z
  .object({
    externalUserId: z
      .string()
      .max(256, 'externalIdentity.externalUserId must be 256 characters or less')
      .optional(),
    role: z.string().max(64).optional(),
    anonymousVisitorId: z
      .string()
      .max(256, 'externalIdentity.anonymousVisitorId must be 256 characters or less')
      .optional(),
  })
  .meta({ id: 'ExternalIdentity' });

export const ChatHistoryItemSchema = z.object({
  role: z.string({ error: 'chatHistory items need a role' }),
  content: z.string({ error: 'chatHistory items need a content string' }),
});

export const ChatMessageInput = z.object({
  appId: z.string(),
  message: z
    .string({ error: 'message is required' })
    .min(1, 'message is required')
    .max(2000, 'message must be 2000 characters or less')
    .refine((s) => s.trim().length > 0, 'message is required'),
  role: z
    .string({ error: 'role is required' })
    .trim()
    .min(1, 'role is required')
    .max(64)
    .describe(
      'Who is writing, in your app’s own words (`student`, `teacher`, `customer`, `visitor`…): the model is told "The person writing has the role: <role>" and the message is stored with it as `metadata.callerRole`. Not the message’s author role (the message is always the user’s).',
    ),
  threadId: z.string().max(64).optional(),
  sessionId: z.string().max(256, 'sessionId must be 256 characters or less').optional(),
  lessonContext: contextObject,
  sessionContext: contextObject,
  pageContext: contextObject,
  chatHistory: z
    .array(ChatHistoryItemSchema, { error: 'chatHistory must be an array' })
    .max(100, 'chatHistory may hold at most 100 messages')
    .optional(),
  controls: ControlsSchema.optional(),
  externalIdentity: ExternalIdentitySchema.optional(),
});
export type ChatMessageInput = z.infer<typeof ChatMessageInput>;

export const ChatMetadataSchema = z.object({
  model: z.string(),
  tokensUsed: z.object({ input: z.number(), output: z.number(), total: z.number() }),
  latencyMs: z.number(),
});

export const ContextWindowSchema = z.object({
  utilization: z.number().min(0).max(1).describe('Prompt tokens / the model context window'),
});

export const ChatResponseSchema = z
  .object({
    threadId: z.string(),
    turnId: z.string(),
    content: z.string(),
    role: z.literal('assistant'),
    metadata: ChatMetadataSchema,
    contextWindow: ContextWindowSchema,
  })
  .meta({ id: 'AppChatResponse' });
export type ChatResponse = z.infer<typeof ChatResponseSchema>;

/** The events of `POST /apps/{appId}/chat/message/stream` (spec 6.2). */
export const ChatStreamEventSchema = z
  .discriminatedUnion('type', [
    z.object({ type: z.literal('token'), content: z.string() }),
    z.object({
      type: z.literal('done'),
      threadId: z.string(),
      turnId: z.string(),
      contextWindow: ContextWindowSchema,
      metadata: ChatMetadataSchema,
    }),
    z.object({ type: z.literal('error'), code: z.string(), message: z.string() }),
  ])
  .meta({ id: 'AppChatStreamEvent' });
export type ChatStreamEvent = z.infer<typeof ChatStreamEventSchema>;

// ---------------------------------------------------------------- memory

export const ThreadSchema = z
  .object({
    id: z.string(),
    app_id: z.string(),
    workspace_id: z.string(),
    session_id: z.string().nullable(),
    title: z.string(),
    status: z.enum(THREAD_STATUSES),
    message_count: z.number(),
    metadata: JsonObject,
    created_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: 'AppThread' });
export type ThreadDto = z.infer<typeof ThreadSchema>;

export const ThreadMessageSchema = z
  .object({
    id: z.string(),
    workspace_id: z.string(),
    app_id: z.string(),
    thread_id: z.string(),
    role: z.enum(['user', 'assistant', 'system']),
    content: z.string(),
    sequence_number: z.number(),
    request_id: z.string().nullable(),
    turn_id: z.string().nullable(),
    provider_status: z.string().describe('`success`, `error`, `pending` (turn in progress) or `saved`'),
    error_code: z.string().nullable().describe('Set when the turn failed, e.g. `MODEL_ERROR`'),
    latency_ms: z.number(),
    input_tokens: z.number(),
    output_tokens: z.number(),
    cost_usd: z.number(),
    rag_sources: z.array(z.unknown()),
    metadata: JsonObject,
    created_at: z.string(),
  })
  .meta({ id: 'AppThreadMessage' });
export type ThreadMessageDto = z.infer<typeof ThreadMessageSchema>;

const PageMetaSchema = z.object({ limit: z.number(), offset: z.number(), total: z.number() });

export const ThreadListSchema = z
  .object({ data: z.array(ThreadSchema), meta: PageMetaSchema })
  .meta({ id: 'AppThreadList' });
export const ThreadEnvelopeSchema = z.object({ data: ThreadSchema }).meta({ id: 'AppThreadEnvelope' });
export const ThreadMessageListSchema = z
  .object({ data: z.array(ThreadMessageSchema), meta: PageMetaSchema })
  .meta({ id: 'AppThreadMessageList' });

const statusEnum = z.enum(THREAD_STATUSES, { error: INVALID_THREAD_STATUS });
/** `limit`/`offset` of the memory and insights lists: an integer, clamped by the service. */
export const pageNumber = (field: string, description?: string) => {
  const n = z.number({ error: `${field} must be a number` }).int(`${field} must be a number`);
  return (description ? n.describe(description) : n).optional();
};

export const ListThreadsInput = z.object({
  appId: z.string(),
  limit: pageNumber('limit', 'Threads per page: default 20, capped at 100.'),
  offset: pageNumber('offset', 'Threads to skip: default 0.'),
  status: statusEnum.optional(),
});

export const CreateThreadInput = z.object({
  appId: z.string(),
  title: z
    .string()
    .trim()
    .min(1, 'title must not be empty')
    .max(200, 'title must be 200 characters or less')
    .optional(),
  metadata: JsonObject.optional(),
  sessionId: z.string().max(256, 'sessionId must be 256 characters or less').optional(),
});

export const ThreadRefInput = z.object({ appId: z.string(), threadId: z.string() });

export const UpdateThreadInput = z.object({
  appId: z.string(),
  threadId: z.string(),
  title: z
    .string()
    .trim()
    .min(1, 'title must not be empty')
    .max(200, 'title must be 200 characters or less')
    .optional(),
  status: statusEnum.optional(),
});

export const ListMessagesInput = z.object({
  appId: z.string(),
  threadId: z.string(),
  limit: pageNumber('limit', 'Messages per page: default 50, capped at 200.'),
  offset: pageNumber('offset', 'Messages to skip: default 0.'),
});

export const SaveMessageItemSchema = z.object({
  role: z.enum(['user', 'assistant'], { error: 'role must be one of: user, assistant' }),
  content: z
    .string({ error: 'content is required' })
    .min(1, 'content is required')
    .max(100_000, 'content must be 100000 characters or less'),
  requestId: z.string().max(256).optional(),
  turnId: z.string().max(256).optional(),
  metadata: JsonObject.optional(),
});

export const SaveMessagesInput = z.object({
  appId: z.string(),
  threadId: z.string({ error: 'threadId is required' }).min(1, 'threadId is required'),
  messages: z
    .array(SaveMessageItemSchema, { error: 'messages must be a non-empty array' })
    .min(1, 'messages must be a non-empty array')
    .max(100, 'Maximum 100 messages per request'),
});
export type SaveMessagesInput = z.infer<typeof SaveMessagesInput>;

export const SaveMessagesResultSchema = z
  .object({ saved: z.number(), threadId: z.string() })
  .meta({ id: 'AppSaveMessagesResult' });

export const MemoryStatusSchema = z
  .object({
    appId: z.string(),
    threadCount: z.number(),
    activeThreadCount: z.number(),
    messageCount: z.number(),
  })
  .meta({ id: 'AppMemoryStatus' });

export const DeleteThreadResultSchema = z
  .object({ success: z.literal(true), threadId: z.string() })
  .meta({ id: 'AppThreadDeleted' });
