import { defineEntity, type InferEntity, p } from '@mikro-orm/core';

export const WidgetTokenEntity = defineEntity({
  name: 'WidgetToken',
  tableName: 'widget_tokens',
  properties: {
    id: p.uuid().primary(),
    workspaceId: p.uuid(),
    /** Set for app-scoped tokens; null = every app of the workspace. */
    appId: p.uuid().nullable(),
    name: p.text().nullable(),
    tokenHash: p.text(),
    tokenPrefix: p.text(),
    /** End-user the token speaks for; such a token sees only that user's threads. */
    subject: p.text().nullable(),
    allowedOrigins: p.array(String).columnType('text[]').default([]),
    maxRequests: p.integer().nullable(),
    requestCount: p.integer().default(0),
    expiresAt: p.datetime(),
    revokedAt: p.datetime().nullable(),
    createdByKeyId: p.uuid().nullable(),
    lastUsedAt: p.datetime().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});
export type WidgetToken = InferEntity<typeof WidgetTokenEntity>;

export const widgetTokenEntities = [WidgetTokenEntity];
