import { z } from 'zod';
import { PageLimit } from '../../util/pagination.js';
import { CRON_MAX_LENGTH } from './cron.js';

/** Schedules of one agent at most (docs/agents.md, "Schedules"). */
export const MAX_SCHEDULES_PER_AGENT = 50;
/** Keys of `metadata` the platform sets on every scheduled run. */
export const RESERVED_METADATA_KEYS = ['source', 'scheduleId', 'scheduleTickAt', 'messageId'] as const;

const Cron = z
  .string({ error: 'cron is required' })
  .trim()
  .min(1, 'cron is required')
  .max(CRON_MAX_LENGTH, `cron must be ${CRON_MAX_LENGTH} characters or less`)
  .describe(
    'Cron expression: 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first; aliases such as @daily. Firings closer than SCHEDULE_MIN_INTERVAL_SECONDS (default 60) are refused',
  );
const Timezone = z
  .string()
  .trim()
  .min(1, 'timezone must be an IANA time zone')
  .max(64)
  .describe('IANA time zone the expression is read in (DST applied)');
const Task = z.string({ error: 'task is required' }).trim().min(1, 'task is required').max(100_000);
const Overlap = z
  .enum(['skip', 'queue'], { error: 'overlap must be "skip" or "queue"' })
  .describe(
    '"skip": a tick is skipped (and recorded) while the previous run is live; "queue": it starts anyway',
  );
const Metadata = z
  .record(z.string().min(1).max(64), z.string().max(2048))
  .refine((m) => Object.keys(m).length <= 20, 'metadata holds 20 keys at most')
  .refine(
    (m) => !RESERVED_METADATA_KEYS.some((k) => k in m),
    `metadata may not set ${RESERVED_METADATA_KEYS.join(', ')} (set by the platform on scheduled runs)`,
  )
  .describe(
    'Copied onto every run the schedule starts (strings); webhookUrl, when set, is each run’s completion webhook',
  );

export const CreateScheduleInput = z.object({
  agentId: z.string(),
  cron: Cron,
  timezone: Timezone.default('UTC'),
  task: Task,
  enabled: z.boolean().default(true),
  overlap: Overlap.default('skip'),
  metadata: Metadata.optional(),
});

export const UpdateScheduleInput = z.object({
  agentId: z.string(),
  scheduleId: z.string(),
  cron: Cron.optional(),
  timezone: Timezone.optional(),
  task: Task.optional(),
  enabled: z.boolean().optional().describe('false pauses the schedule; true resumes it from now'),
  overlap: Overlap.optional(),
  metadata: Metadata.optional(),
});

export const ScheduleIdInput = z.object({ agentId: z.string(), scheduleId: z.string() });
export const AgentIdInput = z.object({ agentId: z.string() });
export const TicksInput = z.object({ agentId: z.string(), scheduleId: z.string(), limit: PageLimit });

export const PreviewInput = z.object({
  cron: Cron,
  timezone: Timezone.default('UTC'),
  count: z.coerce.number().int().min(1).max(20).default(5),
});

export const ScheduleSchema = z
  .object({
    id: z.string(),
    agentId: z.string(),
    cron: z.string(),
    timezone: z.string(),
    task: z.string(),
    enabled: z.boolean(),
    overlap: z.enum(['skip', 'queue']),
    metadata: z.record(z.string(), z.string()),
    nextRunAt: z.string().nullable().describe('The next tick; null while paused'),
    lastRunAt: z.string().nullable().describe('When the schedule last started a run (tick or run now)'),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'Schedule' });

export const ScheduleTickSchema = z
  .object({
    id: z.string(),
    tickAt: z.string().describe('The tick time (for "run now", when it was asked)'),
    trigger: z.enum(['schedule', 'manual']),
    status: z
      .enum(['started', 'skipped', 'failed'])
      .describe(
        'started: a run was created; skipped: overlap "skip" and the previous run was live; failed: see reason',
      ),
    runId: z.string().nullable(),
    reason: z.string().nullable(),
    createdAt: z.string(),
  })
  .meta({ id: 'ScheduleTick' });

export const ScheduleOut = z.object({ schedule: ScheduleSchema });
export const ScheduleListOut = z.object({ schedules: z.array(ScheduleSchema) });
export const TickListOut = z.object({ ticks: z.array(ScheduleTickSchema) });
export const PreviewOut = z.object({
  times: z.array(z.string()).describe('The next firings (ISO 8601, UTC)'),
  intervalSeconds: z.number().describe('Shortest time between two firings (up to a day)'),
});
export const ScheduleDeleted = z.object({ deleted: z.literal(true) });
export const ScheduleRunCreated = z
  .object({ runId: z.string(), sessionId: z.string(), created_at: z.string() })
  .meta({ id: 'ScheduleRunCreated' });

export type CreateScheduleBody = Omit<z.infer<typeof CreateScheduleInput>, 'agentId'>;
export type UpdateScheduleBody = Omit<z.infer<typeof UpdateScheduleInput>, 'agentId' | 'scheduleId'>;
