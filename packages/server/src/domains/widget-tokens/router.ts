import { z } from 'zod';
import { keyProcedure, router } from '../../trpc.js';
import {
  CreatedWidgetTokenSchema,
  CreateWidgetTokenInput,
  ListWidgetTokensInput,
  WidgetTokenListSchema,
  WidgetTokenSchema,
} from './schema.js';
import { WidgetTokensService } from './service.js';

const TAGS = ['Widget tokens'];
const about =
  'Extension (spec 5 leaves widget token format and issuance open). Requires an API key: a widget token cannot mint or list tokens.';

export const widgetTokensRouter = router({
  create: keyProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/widget-tokens',
        tags: TAGS,
        protect: true,
        summary: 'Issue a short-lived widget token for browser calls to the Apps endpoints',
        description: about,
        errorResponses: { 404: 'App not found in this workspace' },
      },
      status: 201,
    })
    .input(CreateWidgetTokenInput)
    .output(CreatedWidgetTokenSchema)
    .mutation(({ ctx, input }) => new WidgetTokensService(ctx.em, ctx.principal).create(input)),

  list: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/widget-tokens',
        tags: TAGS,
        protect: true,
        summary: 'List widget tokens',
        description: about,
      },
    })
    .input(ListWidgetTokensInput)
    .output(WidgetTokenListSchema)
    .query(({ ctx, input }) => new WidgetTokensService(ctx.em, ctx.principal).list(input)),

  revoke: keyProcedure
    .meta({
      openapi: {
        method: 'DELETE',
        path: '/widget-tokens/{tokenId}',
        tags: TAGS,
        protect: true,
        summary: 'Revoke a widget token (effective on its next request)',
        description: about,
        errorResponses: { 404: 'Widget token not found' },
      },
    })
    .input(z.object({ tokenId: z.string() }))
    .output(z.object({ revoked: z.literal(true), widgetToken: WidgetTokenSchema }))
    .mutation(({ ctx, input }) => new WidgetTokensService(ctx.em, ctx.principal).revoke(input.tokenId)),
});
