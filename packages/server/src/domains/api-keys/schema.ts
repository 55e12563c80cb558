import { z } from 'zod';

export const ApiKeySchema = z
  .object({
    id: z.string(),
    workspaceId: z.string(),
    name: z.string().nullable(),
    prefix: z.string().describe('`svc_ai_` and the first four characters of the key, for recognising it'),
    createdAt: z.string(),
    lastUsedAt: z.string().nullable().describe('Recorded at most once a minute'),
    revokedAt: z.string().nullable(),
    usage: z
      .object({
        requests: z.number(),
        inputTokens: z.number(),
        outputTokens: z.number(),
        costUsd: z.number(),
      })
      .describe('What this key has consumed (every key shares the workspace pool and balance)'),
  })
  .meta({ id: 'ApiKey' });

export const ListApiKeysInput = z.object({
  workspaceId: z.string(),
  includeRevoked: z
    .enum(['true', 'false'], { error: 'includeRevoked must be true or false' })
    .optional()
    .describe('Also list revoked keys (default false)'),
});

export const CreateApiKeyInput = z.object({
  workspaceId: z.string(),
  name: z
    .string({ error: 'name must be a string' })
    .trim()
    .max(100, 'name must be 100 characters or less')
    .nullish()
    .describe('Optional descriptive name'),
});

export const CreatedApiKeySchema = z
  .object({
    key: z.string().describe('The key (`svc_ai_…`), shown only this once'),
    apiKey: ApiKeySchema,
  })
  .meta({ id: 'CreatedApiKey' });

export const RevokeApiKeyInput = z.object({ workspaceId: z.string(), keyId: z.string() });
