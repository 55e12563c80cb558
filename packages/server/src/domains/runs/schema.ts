import { z } from 'zod';
import { PageLimit, PageOffset } from '../../util/pagination.js';

/**
 * `metadata.source` values naming a messaging integration: runs mentioned there start
 * through that platform's webhook, never through POST …/runs (docs/runs.md).
 */
export const MESSAGING_SOURCES = [
  'slack',
  'discord',
  'teams',
  'msteams',
  'microsoft_teams',
  'telegram',
  'whatsapp',
  'google_chat',
  'mattermost',
  'zulip',
] as const;

export const isMessagingSource = (source: string | undefined) =>
  source !== undefined && (MESSAGING_SOURCES as readonly string[]).includes(source.trim().toLowerCase());

const Short = z.string().max(256);

export const RunMetadataSchema = z
  .object({
    source: Short.optional(),
    containerId: Short.optional(),
    threadId: Short.optional(),
    externalWorkspaceId: Short.optional(),
    messageId: z
      .string()
      .min(1)
      .max(256)
      .optional()
      .describe('Idempotency key: same key, same agent, same run'),
    webhookUrl: z.url().max(2048).optional(),
  })
  .meta({ id: 'RunMetadata' });

export const CreateRunInput = z.object({
  agentId: z.string(),
  task: z.string({ error: 'task is required' }).trim().min(1, 'task is required').max(100_000),
  sessionId: z.string().optional(),
  metadata: RunMetadataSchema.optional(),
  webhookUrl: z
    .url({ error: 'webhookUrl must be an http(s) URL' })
    .max(2048)
    .optional()
    .describe('Completion webhook (also accepted as metadata.webhookUrl); docs/runs.md'),
});

export const RunCreatedSchema = z
  .object({ runId: z.string(), sessionId: z.string(), created_at: z.string() })
  .meta({ id: 'RunCreated' });

export const RUN_STATUSES = ['pending', 'running', 'completed', 'failed', 'cancelled'] as const;

export const RunSchema = z
  .object({
    id: z.string(),
    status: z.enum(RUN_STATUSES),
    task: z.string(),
    session_id: z.string(),
    created_at: z.string(),
    started_at: z.string().nullable(),
    completed_at: z.string().nullable(),
    error: z.string().nullable(),
    metadata: z.record(z.string(), z.unknown()),
  })
  .meta({ id: 'Run' });

export const RunEventSchema = z
  .object({
    id: z
      .string()
      .describe(
        'Run-scoped event id: the decimal form of `sequence_number`, identical to the SSE `id:`, so it can be sent as `Last-Event-ID` (or `after`) to resume after this event',
      ),
    sequence_number: z
      .number()
      .int()
      .describe('Position of the event in the run log (1, 2, 3…), for ordering'),
    event_type: z.string(),
    payload: z.record(z.string(), z.unknown()),
    created_at: z.string(),
  })
  .meta({ id: 'RunEvent' });

export const RunArtifactSchema = z
  .object({
    id: z.string(),
    file_id: z.string().describe('Storage file (type `deliverable`, sourceId = run id)'),
    filename: z.string(),
    mime_type: z.string(),
    size_bytes: z.number(),
    created_at: z.string(),
  })
  .meta({ id: 'RunArtifact' });

export const RunDetailSchema = z
  .object({ run: RunSchema, events: z.array(RunEventSchema), artifacts: z.array(RunArtifactSchema) })
  .meta({ id: 'RunDetail' });

export const ListRunsInput = z.object({
  agentId: z.string(),
  limit: PageLimit,
  offset: PageOffset,
  scheduleId: z
    .uuid({ error: 'scheduleId must be a schedule id' })
    .optional()
    .describe('Only the runs this schedule started (ticks and "run now"); docs/agents.md, "Schedules"'),
});

export const RunListSchema = z
  .object({
    runs: z.array(RunSchema),
    total: z.number().describe('Runs of the agent, for paging with offset (as the sessions list)'),
  })
  .meta({ id: 'RunList' });

export const GetRunInput = z.object({ agentId: z.string(), runId: z.string() });
