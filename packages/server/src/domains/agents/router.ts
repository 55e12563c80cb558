import { z } from 'zod';
import type { Principal } from '../../auth/principal.js';
import { keyProcedure, type RequestContext, router } from '../../trpc.js';
import { pendingApprovalsOfAgent } from './approval-list.js';
import { decideToolApproval } from './approvals.js';
import { AGENT_CONFIG_DEFAULTS } from './config.js';
import {
  AgentCreatedSchema,
  AgentDetailSchema,
  AgentListItemSchema,
  CancelInput,
  CreateAgentInput,
  CreateSessionInput,
  ListSessionsInput,
  SessionSchema,
  SessionTimelineSchema,
  ToolApprovalInput,
  ToolApprovalResponseSchema,
  ToolApprovalSchema,
  ToolResultInput,
  ToolResultResponseSchema,
  UpdateAgentInput,
} from './schema.js';
import { type AgentDeps, AgentsService } from './service.js';
import { AgentTurns } from './turns.js';

const tags = ['Managed agents'];
const svc = (ctx: RequestContext & { principal: Principal }) =>
  new AgentsService(ctx.em, ctx.deps as AgentDeps, ctx.principal);
const turns = (ctx: RequestContext & { principal: Principal }) =>
  new AgentTurns(ctx.em, ctx.deps as AgentDeps, ctx.principal);
const AgentId = z.object({ agentId: z.string() });
const SessionId = z.object({ sessionId: z.string() });
const Deleted = z.object({ deleted: z.literal(true) });

export const agentsRouter = router({
  configDefaults: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/managed-agents/config-defaults',
        tags,
        protect: true,
        summary: 'The platform defaults of an agent config (extension of the spec)',
        description:
          'Extension: not in the interface specification. The config every agent starts from: a create deep-merges its `config` over these (objects key by key, arrays and scalars replace), an update deep-merges over the stored config.',
      },
    })
    .input(z.void())
    .output(z.object({ config: z.record(z.string(), z.unknown()) }))
    .query(() => ({ config: structuredClone(AGENT_CONFIG_DEFAULTS) as unknown as Record<string, unknown> })),

  listAgents: keyProcedure
    .meta({
      openapi: { method: 'GET', path: '/managed-agents/agents', tags, protect: true, summary: 'List agents' },
    })
    .input(z.void())
    .output(z.object({ agents: z.array(AgentListItemSchema) }))
    .query(async ({ ctx }) => ({ agents: await svc(ctx).listAgents() })),

  createAgent: keyProcedure
    .meta({
      status: 201,
      openapi: {
        method: 'POST',
        path: '/managed-agents/agents',
        tags,
        protect: true,
        summary: 'Create an agent',
      },
    })
    .input(CreateAgentInput)
    .output(z.object({ agent: AgentCreatedSchema }))
    .mutation(async ({ ctx, input }) => ({ agent: await svc(ctx).createAgent(input) })),

  getAgent: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/managed-agents/agents/{agentId}',
        tags,
        protect: true,
        summary: 'Get an agent',
      },
    })
    .input(AgentId)
    .output(z.object({ agent: AgentDetailSchema }))
    .query(async ({ ctx, input }) => ({ agent: await svc(ctx).getAgent(input.agentId) })),

  updateAgent: keyProcedure
    .meta({
      openapi: {
        method: 'PATCH',
        path: '/managed-agents/agents/{agentId}',
        tags,
        protect: true,
        summary: 'Update an agent (only sent fields change; config is deep-merged)',
      },
    })
    .input(UpdateAgentInput)
    .output(z.object({ agent: AgentDetailSchema }))
    .mutation(async ({ ctx, input }) => {
      const { agentId, ...patch } = input;
      return { agent: await svc(ctx).updateAgent(agentId, patch) };
    }),

  deleteAgent: keyProcedure
    .meta({
      openapi: {
        method: 'DELETE',
        path: '/managed-agents/agents/{agentId}',
        tags,
        protect: true,
        summary: 'Delete an agent',
      },
    })
    .input(AgentId)
    .output(Deleted)
    .mutation(({ ctx, input }) => svc(ctx).deleteAgent(input.agentId)),

  listSessions: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/managed-agents/agents/{agentId}/sessions',
        tags,
        protect: true,
        summary: 'List the sessions of an agent',
      },
    })
    .input(ListSessionsInput)
    .output(z.object({ sessions: z.array(SessionSchema), total: z.number() }))
    .query(({ ctx, input }) => svc(ctx).listSessions(input.agentId, input.limit, input.offset)),

  createSession: keyProcedure
    .meta({
      status: 201,
      openapi: {
        method: 'POST',
        path: '/managed-agents/agents/{agentId}/sessions',
        tags,
        protect: true,
        summary: 'Create a session (rate limited per workspace)',
      },
    })
    .input(CreateSessionInput)
    .output(
      z.object({
        session: z.object({ id: z.string(), mount: z.string().nullable(), created_at: z.string() }),
      }),
    )
    .mutation(async ({ ctx, input }) => {
      const { agentId, ...rest } = input;
      const s = svc(ctx);
      const session = await s.createSession(agentId, rest);
      Object.assign(ctx.responseHeaders, s.rateHeaders);
      return { session };
    }),

  getSession: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/managed-agents/sessions/{sessionId}',
        tags,
        protect: true,
        summary: 'Get a session',
      },
    })
    .input(SessionId)
    .output(z.object({ session: SessionSchema }))
    .query(async ({ ctx, input }) => ({ session: await svc(ctx).requireSession(input.sessionId) })),

  deleteSession: keyProcedure
    .meta({
      openapi: {
        method: 'DELETE',
        path: '/managed-agents/sessions/{sessionId}',
        tags,
        protect: true,
        summary: 'Delete a session (its running turns are cancelled)',
      },
    })
    .input(SessionId)
    .output(Deleted)
    .mutation(({ ctx, input }) => svc(ctx).deleteSession(input.sessionId)),

  sessionEvents: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/managed-agents/sessions/{sessionId}/events',
        tags,
        protect: true,
        summary: 'The session timeline: messages and turn runs, ascending by created_at',
      },
    })
    .input(SessionId)
    .output(SessionTimelineSchema)
    .query(({ ctx, input }) => svc(ctx).sessionEvents(input.sessionId)),

  submitToolResult: keyProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/managed-agents/sessions/{sessionId}/tool-results',
        tags,
        protect: true,
        summary: 'Post the result (or error) of a pending integrator-owned tool call; the turn resumes',
      },
    })
    .input(ToolResultInput)
    .output(ToolResultResponseSchema)
    .mutation(({ ctx, input }) => turns(ctx).submitToolResult(input)),

  decideToolApproval: keyProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/managed-agents/sessions/{sessionId}/tool-approvals',
        tags,
        protect: true,
        summary: 'Approve or deny a tool call waiting for a decision; the turn resumes',
        description:
          '403 `toolCallId does not belong to session`; 404 `Unknown toolCallId`; 409 once decided (`APPROVAL_DECIDED`) or past its deadline (`APPROVAL_EXPIRED`); 400 when `arguments` break the tool\'s inputSchema (`INVALID_ARGUMENTS`). docs/agents.md, "Tool approval".',
      },
    })
    .input(ToolApprovalInput)
    .output(ToolApprovalResponseSchema)
    .mutation(async ({ ctx, input }) => {
      const { sessionId, ...decision } = input;
      const session = await svc(ctx).requireSession(sessionId);
      return decideToolApproval(ctx.em, ctx.deps.runs, ctx.principal.workspaceId, session.id, decision);
    }),

  listPendingApprovals: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/managed-agents/agents/{agentId}/tool-approvals',
        tags,
        protect: true,
        summary: "Tool calls of the agent's runs waiting for a decision (extension of the spec)",
        description: 'Oldest first; calls past their deadline are left out. docs/agents.md, "Tool approval".',
      },
    })
    .input(z.object({ agentId: z.string(), limit: z.coerce.number().int().min(1).max(200).default(50) }))
    .output(z.object({ approvals: z.array(ToolApprovalSchema) }))
    .query(async ({ ctx, input }) => {
      const agent = await svc(ctx).requireAgent(input.agentId);
      return {
        approvals: await pendingApprovalsOfAgent(ctx.em, ctx.principal.workspaceId, agent.id, input.limit),
      };
    }),

  cancelRun: keyProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/managed-agents/sessions/{sessionId}/cancel',
        tags,
        protect: true,
        summary: 'Cancel a running turn run or autonomous run of the session',
      },
    })
    .input(CancelInput)
    .output(z.object({ runId: z.string(), status: z.literal('cancelled') }))
    .mutation(({ ctx, input }) => turns(ctx).cancelRun(input.sessionId, input.runId)),
});
