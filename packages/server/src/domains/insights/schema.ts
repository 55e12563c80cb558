import { z } from 'zod';
import { INVALID_THREAD_STATUS, JsonObject, pageNumber, THREAD_STATUSES } from '../apps/schema.js';

/** An ISO 8601 date or date-time (`2026-11-01`, `2026-11-01T10:00:00Z`, with an offset…). */
const ISO_8601 = /^\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}:?\d{2})?)?$/;
const isoDate = (field: string) =>
  z
    .string({ error: `${field} must be an ISO 8601 date` })
    .refine((s) => ISO_8601.test(s) && !Number.isNaN(Date.parse(s)), `${field} must be an ISO 8601 date`)
    .optional();

/** One value or the repeated parameter (`?app_id=a&app_id=b`). */
const oneOrMany = z.union([z.string(), z.array(z.string())]).optional();

export const ListConversationsInput = z.object({
  workspaceId: z.string(),
  limit: pageNumber('limit', 'Conversations per page: default 20, clamped to 1 to 100.'),
  offset: pageNumber('offset', 'Conversations to skip: default 0.'),
  from: isoDate('from'),
  to: isoDate('to'),
  app_id: oneOrMany,
  app_ids: z.string().optional(),
  user_key: z.string().max(256, 'user_key must be 256 characters or less').optional(),
  status: z.enum(THREAD_STATUSES, { error: INVALID_THREAD_STATUS }).optional(),
});

export const ConversationRefInput = z.object({ workspaceId: z.string(), threadId: z.string() });

export const UsageSummarySchema = z
  .object({
    totalCostUsd: z.number(),
    inputTokens: z.number(),
    outputTokens: z.number(),
    requestCount: z.number(),
  })
  .meta({ id: 'ConversationUsageSummary' });

const conversationBase = {
  id: z.string(),
  workspace_id: z.string(),
  app_id: z.string(),
  session_id: z.string().nullable(),
  title: z.string().nullable(),
  status: z.enum(THREAD_STATUSES).nullable(),
  message_count: z.number().nullable(),
  created_at: z.string().nullable(),
  updated_at: z.string().nullable(),
  metadata: JsonObject.nullable(),
};

export const ConversationSummarySchema = z
  .object({
    ...conversationBase,
    app_name: z.string().nullable(),
    user_key: z.string().nullable().describe('external_user_id, else anonymous_visitor_id, else session_id'),
    usage_summary: UsageSummarySchema,
  })
  .meta({ id: 'ConversationSummary' });

export const ConversationListSchema = z.object({
  data: z.array(ConversationSummarySchema),
  meta: z.object({ limit: z.number(), offset: z.number(), total: z.number() }),
});

const ComponentLineSchema = z
  .object({
    component: z.string().describe('input_tokens, output_tokens, image…'),
    quantity: z.number(),
    unit_price_usd: z.number(),
    cost_usd: z.number(),
  })
  .meta({ id: 'UsageComponentLine' });

export const ConversationMessageSchema = z
  .object({
    id: z.string(),
    role: z.enum(['user', 'assistant', 'system']),
    content: z.string().describe('Cut at 4000 characters, then an ellipsis (…)'),
    sequence_number: z.number(),
    created_at: z.string(),
    provider_status: z.string(),
    error_code: z.string().nullable(),
  })
  .meta({ id: 'ConversationMessage' });

export const ConversationUsageRecordSchema = z
  .object({
    id: z.string(),
    request_id: z.string(),
    cost_usd: z.number(),
    input_tokens: z.number(),
    output_tokens: z.number(),
    usage_timestamp: z.string(),
    endpoint: z.string(),
    model: z.string(),
    provider_status: z.string(),
    component_lines: z.array(ComponentLineSchema),
  })
  .meta({ id: 'ConversationUsageRecord' });

export const ConversationUsageEventSchema = z
  .object({
    id: z.string().describe('`<usage record id>:<line index>`'),
    usage_record_id: z.string(),
    request_id: z.string(),
    component: z.string(),
    quantity: z.number(),
    unit_price_usd: z.number(),
    cost_usd: z.number(),
    endpoint: z.string(),
    model: z.string(),
    provider_status: z.string(),
    usage_timestamp: z.string(),
  })
  .meta({ id: 'ConversationUsageEvent' });

export const ConversationDetailSchema = z
  .object({
    ...conversationBase,
    messages: z.array(ConversationMessageSchema),
    usage_records: z.array(ConversationUsageRecordSchema),
    usage_events: z.array(ConversationUsageEventSchema),
  })
  .meta({ id: 'ConversationDetail' });

export type ConversationSummary = z.infer<typeof ConversationSummarySchema>;
export type ConversationDetail = z.infer<typeof ConversationDetailSchema>;

export const WorkspaceUsageInput = z.object({
  workspaceId: z.string(),
  days: z.coerce
    .number({ error: 'days must be an integer from 1 to 90' })
    .int('days must be an integer from 1 to 90')
    .min(1, 'days must be an integer from 1 to 90')
    .max(90, 'days must be an integer from 1 to 90')
    .optional(),
});

const usageTotals = {
  requests: z.number(),
  inputTokens: z.number(),
  outputTokens: z.number(),
  costUsd: z.number(),
};

export const WorkspaceUsageSchema = z
  .object({
    from: z.string().meta({ description: 'Start of the window (midnight UTC, inclusive)' }),
    to: z.string().meta({ description: 'End of the window (now)' }),
    credits: z.object({ balanceUsd: z.number() }),
    tokenQuota: z.object({
      quota: z.number().nullable().meta({ description: 'Monthly token quota; null: unlimited' }),
      used: z.number().meta({ description: 'Tokens used in the current billing cycle' }),
      cycleStart: z.string(),
      resetsAt: z.string(),
    }),
    totals: z.object({ ...usageTotals, errors: z.number() }),
    byDay: z.array(z.object({ date: z.string().meta({ description: 'YYYY-MM-DD (UTC)' }), ...usageTotals })),
    byModel: z.array(z.object({ model: z.string(), ...usageTotals })),
    byApiKey: z.array(
      z.object({
        apiKeyId: z
          .string()
          .nullable()
          .meta({ description: 'null: calls made without a key (web console sessions)' }),
        name: z.string().nullable(),
        prefix: z.string().nullable(),
        ...usageTotals,
      }),
    ),
    recentErrors: z.array(
      z.object({
        id: z.string(),
        createdAt: z.string(),
        endpoint: z.string(),
        model: z.string(),
        status: z.string().meta({ description: 'Provider status of the call (`error`, `aborted`, …)' }),
        requestId: z.string(),
        apiKeyId: z.string().nullable(),
      }),
    ),
  })
  .meta({ id: 'WorkspaceUsage' });
export type WorkspaceUsage = z.infer<typeof WorkspaceUsageSchema>;

export const RequestUsageInput = z.object({ workspaceId: z.string(), requestId: z.string().max(200) });

export const RequestUsageSchema = z
  .object({
    data: z.array(
      z.object({
        id: z.string(),
        createdAt: z.string(),
        endpoint: z.string(),
        model: z.string(),
        inputTokens: z.number(),
        outputTokens: z.number(),
        costUsd: z.number(),
        status: z.string(),
        latencyMs: z.number(),
        apiKeyId: z.string().nullable(),
      }),
    ),
  })
  .meta({ id: 'RequestUsage' });
export type RequestUsage = z.infer<typeof RequestUsageSchema>;
