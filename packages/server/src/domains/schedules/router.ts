import { keyProcedure, router } from '../../trpc.js';
import {
  AgentIdInput,
  CreateScheduleInput,
  PreviewInput,
  PreviewOut,
  ScheduleDeleted,
  ScheduleIdInput,
  ScheduleListOut,
  ScheduleOut,
  ScheduleRunCreated,
  TickListOut,
  TicksInput,
  UpdateScheduleInput,
} from './schema.js';
import { previewSchedule, SchedulesService } from './service.js';

const tags = ['Managed agents'];
const base = '/managed-agents/agents/{agentId}/schedules';
type Ctx = Parameters<Parameters<typeof keyProcedure.query>[0]>[0]['ctx'];
const svc = (ctx: Ctx) => new SchedulesService(ctx.em, ctx.deps, ctx.principal);

/** Agent schedules (docs/agents.md, "Schedules"). */
export const schedulesRouter = router({
  createSchedule: keyProcedure
    .meta({
      status: 201,
      openapi: {
        method: 'POST',
        path: base,
        tags,
        protect: true,
        summary: 'Create a schedule: an autonomous run of the agent at every tick of a cron expression',
      },
    })
    .input(CreateScheduleInput)
    .output(ScheduleOut)
    .mutation(async ({ ctx, input }) => {
      const { agentId, ...body } = input;
      return { schedule: await svc(ctx).create(agentId, body) };
    }),

  listSchedules: keyProcedure
    .meta({
      openapi: { method: 'GET', path: base, tags, protect: true, summary: 'List the schedules of an agent' },
    })
    .input(AgentIdInput)
    .output(ScheduleListOut)
    .query(async ({ ctx, input }) => ({ schedules: await svc(ctx).list(input.agentId) })),

  getSchedule: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: `${base}/{scheduleId}`,
        tags,
        protect: true,
        summary: 'Get a schedule',
      },
    })
    .input(ScheduleIdInput)
    .output(ScheduleOut)
    .query(async ({ ctx, input }) => ({ schedule: await svc(ctx).get(input.agentId, input.scheduleId) })),

  updateSchedule: keyProcedure
    .meta({
      openapi: {
        method: 'PATCH',
        path: `${base}/{scheduleId}`,
        tags,
        protect: true,
        summary: 'Update a schedule (only sent fields change; enabled: false pauses it)',
      },
    })
    .input(UpdateScheduleInput)
    .output(ScheduleOut)
    .mutation(async ({ ctx, input }) => {
      const { agentId, scheduleId, ...patch } = input;
      return { schedule: await svc(ctx).update(agentId, scheduleId, patch) };
    }),

  deleteSchedule: keyProcedure
    .meta({
      openapi: {
        method: 'DELETE',
        path: `${base}/{scheduleId}`,
        tags,
        protect: true,
        summary: 'Delete a schedule (its runs stay)',
      },
    })
    .input(ScheduleIdInput)
    .output(ScheduleDeleted)
    .mutation(({ ctx, input }) => svc(ctx).delete(input.agentId, input.scheduleId)),

  runSchedule: keyProcedure
    .meta({
      status: 201,
      openapi: {
        method: 'POST',
        path: `${base}/{scheduleId}/run`,
        tags,
        protect: true,
        summary: 'Run a schedule now (an autonomous run of its task, whatever its cron)',
      },
    })
    .input(ScheduleIdInput)
    .output(ScheduleRunCreated)
    .mutation(({ ctx, input }) =>
      svc(ctx).runNow(input.agentId, input.scheduleId, { requestId: ctx.requestId }),
    ),

  listScheduleTicks: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: `${base}/{scheduleId}/ticks`,
        tags,
        protect: true,
        summary: 'History of a schedule, newest first: each tick (started, skipped, failed) and each run now',
      },
    })
    .input(TicksInput)
    .output(TickListOut)
    .query(async ({ ctx, input }) => ({
      ticks: await svc(ctx).ticks(input.agentId, input.scheduleId, input.limit),
    })),

  previewSchedule: keyProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/managed-agents/schedules/preview',
        tags,
        protect: true,
        summary: 'Check a cron expression and time zone as a schedule would, and list its next firings',
      },
    })
    .input(PreviewInput)
    .output(PreviewOut)
    .mutation(({ ctx, input }) => previewSchedule(ctx.deps, input)),
});
