import { z } from 'zod';
import { requireManager } from '../../auth/authenticate.js';
import { router, sessionProcedure } from '../../trpc.js';
import { assertSessionWorkspace } from '../identity/workspace-guard.js';
import { toApiKeyDto, WorkspacesService } from '../workspaces/service.js';
import {
  ApiKeySchema,
  CreateApiKeyInput,
  CreatedApiKeySchema,
  ListApiKeysInput,
  RevokeApiKeyInput,
} from './schema.js';

const BASE = '/workspaces/{workspaceId}/api-keys';
const tags = ['API keys'];
const about =
  'Extension: spec 2.1 keeps key creation and deletion out of the API-key API ("web interface only"); these operations are that web interface’s, so they accept only a session (an API key gets 401 `Authentication required`) of an owner or admin of the workspace (a member gets 403 `Insufficient permissions to create API keys`).';
const errors = {
  401: 'Authentication required',
  403: 'Insufficient permissions to create API keys; Access denied to workspace (not the session’s workspace)',
};

/**
 * A session of an owner or admin acting in `{workspaceId}` (spec 5.3): checked before the
 * input is validated, so a member or a foreign workspace learns nothing from validation errors.
 */
const keyManagerProcedure = sessionProcedure.use(async ({ ctx, getRawInput, next }) => {
  const raw = (await getRawInput()) as { workspaceId?: unknown } | undefined;
  assertSessionWorkspace(ctx.principal, raw?.workspaceId);
  requireManager(ctx.principal, 'KEY_MANAGEMENT_FORBIDDEN');
  return next({ ctx: { ...ctx, workspaces: new WorkspacesService(ctx.em) } });
});

export const apiKeysRouter = router({
  list: keyManagerProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: BASE,
        tags,
        protect: true,
        summary: 'List the workspace’s API keys with their usage',
        description: about,
        errorResponses: errors,
      },
    })
    .input(ListApiKeysInput)
    .output(z.object({ apiKeys: z.array(ApiKeySchema) }))
    .query(async ({ ctx, input }) => ({
      apiKeys: (
        await ctx.workspaces.listApiKeys(ctx.principal.workspaceId, {
          includeRevoked: input.includeRevoked === 'true',
        })
      ).map(toApiKeyDto),
    })),

  create: keyManagerProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: BASE,
        tags,
        protect: true,
        summary: 'Create an API key (shown once)',
        description: `${about} At most 10 active keys per workspace: the 11th answers 400 \`API_KEY_LIMIT_REACHED\`.`,
        errorResponses: { ...errors, 400: 'Validation error; API_KEY_LIMIT_REACHED' },
      },
      status: 201,
    })
    .input(CreateApiKeyInput)
    .output(CreatedApiKeySchema)
    .mutation(async ({ ctx, input }) => {
      const { key, apiKey } = await ctx.workspaces.createApiKey({
        workspaceId: ctx.principal.workspaceId,
        name: input.name ?? null,
        actingUserId: ctx.principal.userId,
      });
      return { key, apiKey: toApiKeyDto(apiKey) };
    }),

  revoke: keyManagerProcedure
    .meta({
      openapi: {
        method: 'DELETE',
        path: `${BASE}/{keyId}`,
        tags,
        protect: true,
        summary: 'Revoke an API key (effective on its next request)',
        description: about,
        errorResponses: { ...errors, 404: 'API key not found' },
      },
    })
    .input(RevokeApiKeyInput)
    .output(z.object({ revoked: z.literal(true), apiKey: ApiKeySchema }))
    .mutation(async ({ ctx, input }) => ({
      revoked: true as const,
      apiKey: toApiKeyDto(await ctx.workspaces.revokeApiKey(ctx.principal.workspaceId, input.keyId)),
    })),
});
