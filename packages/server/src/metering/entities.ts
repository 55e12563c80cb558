import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import type { UsageComponentLine } from './types.js';

/** One metered model or image call (spec 2.10 `usage_records`). Written by `Metering.record`. */
export const UsageRecordEntity = defineEntity({
  name: 'UsageRecord',
  tableName: 'usage_records',
  properties: {
    id: p.uuid().primary(),
    workspaceId: p.uuid(),
    apiKeyId: p.uuid().nullable(),
    appId: p.text().nullable(),
    threadId: p.text().nullable(),
    sessionId: p.text().nullable(),
    runId: p.text().nullable(),
    requestId: p.text(),
    endpoint: p.text(),
    model: p.text(),
    meter: p.text().$type<'tokens' | 'credits'>(),
    inputTokens: p.bigint('number'),
    outputTokens: p.bigint('number'),
    costMicros: p.bigint('number'),
    providerStatus: p.text(),
    latencyMs: p.integer(),
    componentLines: p.json<UsageComponentLine[]>(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});
export type UsageRecord = InferEntity<typeof UsageRecordEntity>;

export const meteringEntities = [UsageRecordEntity];
