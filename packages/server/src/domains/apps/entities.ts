import { defineEntity, type InferEntity, p } from '@mikro-orm/core';

export type ThreadStatus = 'active' | 'archived' | 'closed';

export const AppThreadEntity = defineEntity({
  name: 'AppThread',
  tableName: 'app_threads',
  properties: {
    id: p.uuid().primary(),
    workspaceId: p.uuid(),
    appId: p.uuid(),
    sessionId: p.text().nullable(),
    title: p.text().default('New Thread'),
    status: p.text().$type<ThreadStatus>().default('active'),
    /** Also the last sequence number (messages are never removed). */
    messageCount: p.integer().default(0),
    metadata: p.json<Record<string, unknown>>().default('{}'),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type AppThread = InferEntity<typeof AppThreadEntity>;

export const AppThreadMessageEntity = defineEntity({
  name: 'AppThreadMessage',
  tableName: 'app_thread_messages',
  properties: {
    id: p.uuid().primary(),
    workspaceId: p.uuid(),
    appId: p.uuid(),
    threadId: p.uuid(),
    role: p.text().$type<'user' | 'assistant' | 'system'>(),
    content: p.text(),
    sequenceNumber: p.integer(),
    requestId: p.text().nullable(),
    turnId: p.text().nullable(),
    providerStatus: p.text().default('success'),
    errorCode: p.text().nullable(),
    latencyMs: p.integer().default(0),
    inputTokens: p.integer().default(0),
    outputTokens: p.integer().default(0),
    costMicros: p.bigint('number').default(0),
    ragSources: p.json<unknown[]>().default('[]'),
    metadata: p.json<Record<string, unknown>>().default('{}'),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});
export type AppThreadMessage = InferEntity<typeof AppThreadMessageEntity>;

export const appsEntities = [AppThreadEntity, AppThreadMessageEntity];
