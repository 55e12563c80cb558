import { z } from 'zod';
import { keyProcedure, router } from '../../trpc.js';
import { assertWorkspace } from '../storage/service.js';
import {
  ConversationDetailSchema,
  ConversationListSchema,
  ConversationRefInput,
  ListConversationsInput,
  RequestUsageInput,
  RequestUsageSchema,
  WorkspaceUsageInput,
  WorkspaceUsageSchema,
} from './schema.js';
import { appIdsOf, InsightsService } from './service.js';
import { requestUsage, workspaceUsage } from './usage.js';

const BASE = '/workspaces/{workspaceId}/insights/conversations';
const tags = ['Insights'];

/** Key auth (no widget tokens), then `{workspaceId}` must be the key's workspace: 401 `Unauthorized`. */
const insightsProcedure = keyProcedure.use(async ({ ctx, getRawInput, next }) => {
  const raw = (await getRawInput()) as { workspaceId?: unknown } | undefined;
  assertWorkspace(ctx.principal.workspaceId, raw?.workspaceId);
  return next({ ctx: { ...ctx, insights: new InsightsService(ctx.em, ctx.principal.workspaceId) } });
});

export const insightsRouter = router({
  listConversations: insightsProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: BASE,
        tags,
        protect: true,
        summary: 'List conversations with their usage',
        description:
          "App conversations (memory threads) of the workspace, most recently active first, each with its usage and cost. `limit` is clamped to 1–100 (default 20), `offset` to ≥ 0. `from`/`to` (ISO 8601, inclusive) compare with `updated_at`. `app_id` may repeat; `app_ids` is comma-separated. `user_key` matches `metadata.external_user_id`, `metadata.anonymous_visitor_id` or `session_id`. 401 `Unauthorized` when `workspaceId` is not the key's workspace.",
      },
    })
    .input(ListConversationsInput)
    .output(ConversationListSchema)
    .query(({ ctx, input }) =>
      ctx.insights.list({
        limit: input.limit,
        offset: input.offset,
        from: input.from,
        to: input.to,
        appIds: appIdsOf(input.app_id, input.app_ids),
        userKey: input.user_key,
        status: input.status,
      }),
    ),

  getConversation: insightsProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: `${BASE}/{threadId}`,
        tags,
        protect: true,
        summary: 'A conversation with its messages, usage records and usage events',
        description:
          'Messages in order (content cut at 4000 characters, then `…`), every usage record of the thread (oldest first) and the 200 most recent usage events (one per cost component of a record, newest first). 404 `Conversation not found`.',
      },
    })
    .input(ConversationRefInput)
    .output(z.object({ data: ConversationDetailSchema }))
    .query(async ({ ctx, input }) => ({ data: await ctx.insights.get(input.threadId) })),

  usage: insightsProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/workspaces/{workspaceId}/insights/usage',
        tags,
        protect: true,
        summary: 'Workspace usage over time (extension of the spec)',
        description:
          "Extension: not in the interface specification. Usage records of the last `days` days (1–90, default 30; UTC days, today included): totals, requests/tokens/cost by day (every day, zeros included), by model and by API key (`apiKeyId` null: calls without a key, from the web console), the 20 most recent failed calls, the credit balance and the token quota of the current billing cycle with its reset. 401 `Unauthorized` when `workspaceId` is not the caller's workspace.",
      },
    })
    .input(WorkspaceUsageInput)
    .output(WorkspaceUsageSchema)
    .query(({ ctx, input }) =>
      workspaceUsage(ctx.em, ctx.deps.metering, ctx.principal.workspaceId, input.days),
    ),

  requestUsage: insightsProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/workspaces/{workspaceId}/insights/usage/requests/{requestId}',
        tags,
        protect: true,
        summary: 'The usage records of one request (extension of the spec)',
        description:
          "Extension: not in the interface specification. The usage records a request wrote, found by the `X-Request-Id` of its response (oldest first): model, tokens, cost, status. A streamed reply's record is written just after the stream ends, so an empty `data` right after it may fill a moment later. 401 `Unauthorized` when `workspaceId` is not the caller's workspace.",
      },
    })
    .input(RequestUsageInput)
    .output(RequestUsageSchema)
    .query(({ ctx, input }) => requestUsage(ctx.em, ctx.principal.workspaceId, input.requestId)),
});
