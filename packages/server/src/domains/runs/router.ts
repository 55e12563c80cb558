import { keyProcedure, router } from '../../trpc.js';
import {
  CreateRunInput,
  GetRunInput,
  ListRunsInput,
  RunCreatedSchema,
  RunDetailSchema,
  RunListSchema,
} from './schema.js';
import { pollHintMs, RunsService } from './service.js';

const tags = ['Managed agents'];

/** Polling hint headers of the get-run response (docs/runs.md). */
export const POLL_HEADER = 'X-Poll-After-Ms';

export const runsRouter = router({
  createRun: keyProcedure
    .meta({
      status: 201,
      openapi: {
        method: 'POST',
        path: '/managed-agents/agents/{agentId}/runs',
        tags,
        protect: true,
        summary: 'Start an autonomous run (idempotent on metadata.messageId)',
      },
    })
    .input(CreateRunInput)
    .output(RunCreatedSchema)
    .mutation(({ ctx, input }) => {
      const { agentId, ...body } = input;
      return new RunsService(ctx.em, ctx.deps, ctx.principal).create(agentId, body, {
        requestId: ctx.requestId,
      });
    }),

  listRuns: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/managed-agents/agents/{agentId}/runs',
        tags,
        protect: true,
        summary: 'List the autonomous runs of an agent, newest first',
      },
    })
    .input(ListRunsInput)
    .output(RunListSchema)
    .query(({ ctx, input }) =>
      new RunsService(ctx.em, ctx.deps, ctx.principal).list(
        input.agentId,
        input.limit,
        input.offset,
        input.scheduleId,
      ),
    ),

  getRun: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/managed-agents/agents/{agentId}/runs/{runId}',
        tags,
        protect: true,
        summary: `Get a run with its events and artifacts; while it is live, ${POLL_HEADER} and Retry-After say when to poll again`,
      },
    })
    .input(GetRunInput)
    .output(RunDetailSchema)
    .query(async ({ ctx, input }) => {
      const { waiting, ...detail } = await new RunsService(ctx.em, ctx.deps, ctx.principal).get(
        input.agentId,
        input.runId,
      );
      const hint = pollHintMs(ctx.deps, { status: detail.run.status, waiting });
      if (hint !== null) {
        ctx.responseHeaders[POLL_HEADER] = String(hint);
        ctx.responseHeaders['Retry-After'] = String(Math.max(1, Math.ceil(hint / 1000)));
      }
      return detail;
    }),
});
