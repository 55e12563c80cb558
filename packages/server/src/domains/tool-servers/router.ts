import { z } from 'zod';
import { requireManager } from '../../auth/authenticate.js';
import { router, sessionProcedure } from '../../trpc.js';
import { parseAllowlist } from '../agents/outbound.js';
import { assertSessionWorkspace } from '../identity/workspace-guard.js';
import { ConnectToolServerInput, ToolServerSchema, UpdateToolServerInput } from './schema.js';
import { ToolServersService } from './service.js';

const BASE = '/workspaces/{workspaceId}/tool-servers';
const tags = ['Tool servers'];
const errors = {
  401: 'Authentication required',
  403: 'Insufficient permissions to manage tool servers; Access denied to workspace',
};

/** A session acting in `{workspaceId}` (spec 5: tool-server operations take sessions only). */
const inWorkspace = sessionProcedure.use(async ({ ctx, getRawInput, next }) => {
  const raw = (await getRawInput()) as { workspaceId?: unknown } | undefined;
  assertSessionWorkspace(ctx.principal, raw?.workspaceId);
  const toolServers = new ToolServersService(
    ctx.em,
    ctx.deps.config.signingSecret as string,
    parseAllowlist(ctx.deps.config.env.OUTBOUND_ALLOWLIST),
  );
  return next({ ctx: { ...ctx, toolServers } });
});
/** …and an owner or admin (connect, toggle, disconnect). */
const managing = inWorkspace.use(({ ctx, next }) => {
  requireManager(ctx.principal, 'TOOL_SERVERS_FORBIDDEN');
  return next();
});

export const toolServersRouter = router({
  list: inWorkspace
    .meta({
      openapi: {
        method: 'GET',
        path: BASE,
        tags,
        protect: true,
        summary: 'The MCP servers connected to the workspace (any member)',
        errorResponses: errors,
      },
    })
    .input(z.object({ workspaceId: z.string() }))
    .output(z.object({ toolServers: z.array(ToolServerSchema) }))
    .query(async ({ ctx }) => ({ toolServers: await ctx.toolServers.list(ctx.principal.workspaceId) })),

  connect: managing
    .meta({
      openapi: {
        method: 'POST',
        path: BASE,
        tags,
        protect: true,
        summary: 'Connect an MCP server (owners and admins)',
        description:
          'The URL passes the outbound (SSRF) guard, then the server is checked over MCP (Streamable HTTP: initialize and list tools) and its tool list recorded. The optional auth header is stored encrypted and never shown again. Agents use it with `capabilities.mcp_servers: [{"toolServerId": "…"}]`.',
        errorResponses: {
          ...errors,
          400: 'Validation error; URL_NOT_ALLOWED; TOOL_SERVER_UNREACHABLE',
          409: 'TOOL_SERVER_NAME_TAKEN',
        },
      },
      status: 201,
    })
    .input(ConnectToolServerInput)
    .output(z.object({ toolServer: ToolServerSchema }))
    .mutation(async ({ ctx, input }) => ({
      toolServer: await ctx.toolServers.connect(
        ctx.principal.workspaceId,
        ctx.principal.userId ?? null,
        input,
      ),
    })),

  update: managing
    .meta({
      openapi: {
        method: 'PATCH',
        path: `${BASE}/{toolServerId}`,
        tags,
        protect: true,
        summary: 'Enable or disable a connected MCP server (owners and admins)',
        description: 'A disabled server is not offered to any agent turn from the next turn on.',
        errorResponses: { ...errors, 404: 'Tool server not found' },
      },
    })
    .input(UpdateToolServerInput)
    .output(z.object({ toolServer: ToolServerSchema }))
    .mutation(async ({ ctx, input }) => ({
      toolServer: await ctx.toolServers.setEnabled(
        ctx.principal.workspaceId,
        input.toolServerId,
        input.enabled,
      ),
    })),

  disconnect: managing
    .meta({
      openapi: {
        method: 'DELETE',
        path: `${BASE}/{toolServerId}`,
        tags,
        protect: true,
        summary: 'Disconnect an MCP server (owners and admins)',
        description: 'Its stored secret is deleted; agents referencing it no longer get its tools.',
        errorResponses: { ...errors, 404: 'Tool server not found' },
      },
    })
    .input(z.object({ workspaceId: z.string(), toolServerId: z.string() }))
    .output(z.object({ disconnected: z.literal(true), toolServerId: z.string() }))
    .mutation(async ({ ctx, input }) => {
      await ctx.toolServers.disconnect(ctx.principal.workspaceId, input.toolServerId);
      return { disconnected: true as const, toolServerId: input.toolServerId };
    }),
});
