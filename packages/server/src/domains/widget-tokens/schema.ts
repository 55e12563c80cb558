import { z } from 'zod';
import { pageNumber } from '../apps/schema.js';

export const WIDGET_TOKEN_TTL = { defaultSeconds: 3600, minSeconds: 60, maxSeconds: 86_400 };
export const WIDGET_TOKEN_MAX_REQUESTS = { default: 1000, max: 100_000 };
export const MAX_ALLOWED_ORIGINS = 20;

export const WidgetTokenSchema = z
  .object({
    id: z.string(),
    scope: z.enum(['workspace', 'app']),
    appId: z.string().nullable(),
    name: z.string().nullable(),
    prefix: z.string().describe('First characters of the token, for display'),
    subject: z.string().nullable().describe('End user the token speaks for; it sees only their threads'),
    allowedOrigins: z.array(z.string()),
    maxRequests: z.number(),
    requestCount: z.number(),
    expiresAt: z.string(),
    revokedAt: z.string().nullable(),
    lastUsedAt: z.string().nullable(),
    createdAt: z.string(),
  })
  .meta({ id: 'WidgetToken' });
export type WidgetTokenDto = z.infer<typeof WidgetTokenSchema>;

export const CreateWidgetTokenInput = z.object({
  appId: z.string().optional().describe('Scope the token to one app; omitted = every app of the workspace'),
  name: z.string().max(200, 'name must be 200 characters or less').optional(),
  subject: z
    .string()
    .min(1, 'subject must not be empty')
    .max(256, 'subject must be 256 characters or less')
    .optional()
    .describe('End-user id; threads created with the token carry it as metadata.external_user_id'),
  allowedOrigins: z
    .array(z.string(), { error: 'allowedOrigins must be an array of origins' })
    .max(MAX_ALLOWED_ORIGINS, `allowedOrigins may hold at most ${MAX_ALLOWED_ORIGINS} origins`)
    .optional(),
  ttlSeconds: z
    .number({ error: 'ttlSeconds must be a number' })
    .int('ttlSeconds must be an integer')
    .min(WIDGET_TOKEN_TTL.minSeconds, `ttlSeconds must be between 60 and ${WIDGET_TOKEN_TTL.maxSeconds}`)
    .max(WIDGET_TOKEN_TTL.maxSeconds, `ttlSeconds must be between 60 and ${WIDGET_TOKEN_TTL.maxSeconds}`)
    .optional(),
  maxRequests: z
    .number({ error: 'maxRequests must be a number' })
    .int('maxRequests must be an integer')
    .min(1, `maxRequests must be between 1 and ${WIDGET_TOKEN_MAX_REQUESTS.max}`)
    .max(WIDGET_TOKEN_MAX_REQUESTS.max, `maxRequests must be between 1 and ${WIDGET_TOKEN_MAX_REQUESTS.max}`)
    .optional(),
});
export type CreateWidgetTokenInput = z.infer<typeof CreateWidgetTokenInput>;

export const CreatedWidgetTokenSchema = z
  .object({
    token: z.string().describe('The bearer token (`svc_wt_…`), shown only once'),
    widgetToken: WidgetTokenSchema,
  })
  .meta({ id: 'CreatedWidgetToken' });

/** Newest first; `limit` default 50 (clamped to 1..200), `offset`: the apps list's paging. */
export const ListWidgetTokensInput = z.object({
  limit: pageNumber('limit', 'Tokens per page: default 50, clamped to 1 to 200.'),
  offset: pageNumber('offset', 'Tokens to skip: default 0.'),
});

export const WidgetTokenListSchema = z
  .object({
    data: z.array(WidgetTokenSchema),
    meta: z.object({ limit: z.number(), offset: z.number(), total: z.number() }),
  })
  .meta({ id: 'WidgetTokenList' });
