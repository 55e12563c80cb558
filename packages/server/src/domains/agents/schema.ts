import { z } from 'zod';
import { PageLimit, PageOffset } from '../../util/pagination.js';

const JsonObject = z.record(z.string(), z.unknown());
/** OpenAI-compatible function names; also what we accept for tool names everywhere. */
const ToolName = z
  .string()
  .regex(/^[a-zA-Z0-9_.-]{1,64}$/, 'tool names are 1 to 64 letters, digits, "_", "." or "-"');

export const WEB_PROVIDERS = ['brave', 'tavily', 'both'] as const;

export const McpServerSchema = z
  .strictObject({
    name: z
      .string()
      .regex(/^[a-zA-Z0-9_-]{1,32}$/, 'mcp server names are 1 to 32 letters, digits, "_" or "-"'),
    url: z.url(),
    headers: z.record(z.string(), z.string()).optional(),
    allowedTools: z.array(z.string()).optional(),
  })
  .meta({ id: 'McpServerConfig' });

/**
 * A reference to an MCP server connected to the workspace (`/workspaces/{id}/tool-servers`):
 * its URL and stored auth header are used; a disabled or disconnected one is not offered.
 */
export const McpServerRefSchema = z
  .strictObject({
    toolServerId: z.string().min(1, 'toolServerId is required'),
    allowedTools: z.array(z.string()).optional(),
  })
  .meta({ id: 'McpServerRef' });

export const McpServerItemSchema = z
  .union([McpServerRefSchema, McpServerSchema])
  .meta({ id: 'McpServerItem' });
export type McpServerItem = z.infer<typeof McpServerItemSchema>;
export const isMcpServerRef = (s: McpServerItem): s is z.infer<typeof McpServerRefSchema> =>
  'toolServerId' in s;

export const CustomToolSchema = z
  .strictObject({
    name: ToolName,
    description: z.string().max(2000).optional(),
    inputSchema: JsonObject.optional(),
    callbackUrl: z.url().optional(),
  })
  .meta({ id: 'CustomTool' });

/**
 * A partial agent config as callers send it; deep-merged over the defaults. Strict at every
 * level: a misspelt key (`allowed_tools`) would otherwise be stored and silently do nothing,
 * e.g. leave every tool of an MCP server callable (400 names the key path in `details`).
 */
export const AgentConfigInputSchema = z
  .strictObject({
    platformVersion: z.literal(2).optional(),
    kind: z.literal('agent').optional(),
    runtimeMode: z.enum(['assist', 'autonomous']).optional(),
    capabilities: z
      .strictObject({
        memory: z
          .strictObject({ enabled: z.boolean().optional(), scope: z.enum(['agent', 'workspace']).optional() })
          .optional(),
        deliverables: z.strictObject({ enabled: z.boolean().optional() }).optional(),
        tools: z
          .strictObject({
            web_search: z.boolean().optional(),
            web_fetch: z.boolean().optional(),
            web_provider: z.enum(WEB_PROVIDERS).optional(),
          })
          .optional(),
        mcp_servers: z.array(McpServerItemSchema).max(10).optional(),
      })
      .optional(),
    compute: z
      .strictObject({
        maxIterations: z.number().int().min(1).max(100).optional(),
        maxWallClockMs: z.number().int().min(1000).max(3_600_000).optional(),
      })
      .optional(),
    toolAllowlist: z.array(z.string()).nullable().optional(),
    toolApproval: z
      .array(z.string().min(1).max(200))
      .max(200)
      .optional()
      .describe(
        'Tools (platform, custom, MCP `<server>__<tool>`, pack) whose calls wait for a person\'s decision; `"*"` for all (docs/agents.md, "Tool approval")',
      ),
    customTools: z.array(CustomToolSchema).max(64).optional(),
  })
  .meta({ id: 'AgentConfigInput' });

export type AgentConfigInput = z.infer<typeof AgentConfigInputSchema>;

export interface AgentConfig {
  platformVersion: number;
  kind: 'agent';
  runtimeMode: 'assist' | 'autonomous';
  capabilities: {
    memory: { enabled: boolean; scope: 'agent' | 'workspace' };
    deliverables: { enabled: boolean };
    tools: { web_search: boolean; web_fetch: boolean; web_provider: (typeof WEB_PROVIDERS)[number] };
    mcp_servers: McpServerItem[];
  };
  compute: { maxIterations: number; maxWallClockMs: number };
  toolAllowlist?: string[] | null;
  toolApproval: string[];
  customTools: z.infer<typeof CustomToolSchema>[];
  [key: string]: unknown;
}

export const AgentToolBindingSchema = z
  .object({
    toolId: z.string({ error: 'toolId is required' }).min(1, 'toolId is required'),
    enabled: z.boolean().default(true),
  })
  .meta({ id: 'AgentToolBinding', description: 'Binds a platform tool or an integration-pack tool by id.' });

export const IntegrationBindingSchema = z
  .object({
    packId: z.string({ error: 'packId is required' }).min(1, 'packId is required'),
    workspaceIntegrationId: z
      .string({ error: 'workspaceIntegrationId is required' })
      .min(1, 'workspaceIntegrationId is required'),
    enabledSkillIds: z.array(z.string()).optional(),
    enabled: z.boolean().default(true),
  })
  .meta({ id: 'IntegrationBinding' });

export const CreateAgentInput = z.object({
  name: z.string({ error: 'name is required' }).trim().min(1, 'name is required').max(200),
  businessUseCase: z.string().max(2000).optional(),
  description: z.string().max(4000).optional(),
  prompt: z.string().max(100_000).optional(),
  config: AgentConfigInputSchema.optional(),
  llm: z.object({ componentId: z.string().min(1) }).optional(),
});

export const UpdateAgentInput = z.object({
  agentId: z.string(),
  name: z.string().trim().min(1, 'name is required').max(200).optional(),
  description: z.string().max(4000).optional(),
  businessUseCase: z.string().max(2000).optional(),
  prompt: z.string().max(100_000).optional(),
  isPublic: z.boolean().optional(),
  config: AgentConfigInputSchema.optional(),
  tools: z.array(AgentToolBindingSchema).max(100).optional(),
  integrationBindings: z.array(IntegrationBindingSchema).max(50).optional(),
});

export const AgentListItemSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    businessUseCase: z.string().nullable(),
    appType: z.literal('agent'),
    isPublic: z.boolean(),
    status: z.enum(['active', 'draft']),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'AgentListItem' });

export const AgentCreatedSchema = z
  .object({ id: z.string(), name: z.string(), appType: z.literal('agent'), createdAt: z.string() })
  .meta({ id: 'AgentCreated' });

export const AgentDetailSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    businessUseCase: z.string().nullable(),
    prompt: z.string().nullable(),
    mode: z.enum(['assist', 'autonomous']),
    modelId: z.string(),
    status: z.enum(['active', 'draft']),
    isPublic: z.boolean(),
    config: JsonObject,
    tools: z.array(AgentToolBindingSchema),
    integrationBindings: z.array(IntegrationBindingSchema),
    /** Standard Webhooks secret of this agent's callbacks and run webhooks (docs/webhooks.md). */
    callbackSecret: z.string().meta({
      description:
        "Standard Webhooks secret (`whsec_` + base64 key) signing this agent's tool callbacks and run webhooks",
    }),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'AgentDetail' });

export const SessionSchema = z
  .object({
    id: z.string(),
    title: z.string().nullable(),
    mount: z.string().nullable(),
    app_id: z.string(),
    last_message_at: z.string().nullable(),
    created_at: z.string(),
    context: z.object({
      app_id: z.string(),
      origin: z.object({ source: z.string() }),
      kind: z.enum(['chat', 'deliverable_job']),
      end_user_id: z.string().nullable(),
    }),
    metadata: JsonObject,
  })
  .meta({ id: 'AgentSession' });

export const CreateSessionInput = z.object({
  agentId: z.string(),
  metadata: JsonObject.optional(),
  end_user_id: z.string().max(256).optional(),
  title: z.string().max(500).optional(),
});

export const ListSessionsInput = z.object({
  agentId: z.string(),
  limit: PageLimit,
  offset: PageOffset,
});

export const MessageEventSchema = z
  .object({
    type: z.literal('message'),
    id: z.string(),
    role: z.enum(['user', 'assistant', 'tool']),
    content: z.string(),
    metadata: JsonObject,
    created_at: z.string(),
  })
  .meta({ id: 'SessionMessageEvent' });

export const TurnWarningSchema = z
  .object({
    code: z.string().describe('`MCP_SERVER_UNAVAILABLE`'),
    message: z.string(),
    server: z.string().optional().describe('Name of the MCP server concerned'),
  })
  .meta({ id: 'TurnWarning' });

export const ToolApprovalSchema = z
  .object({
    toolCallId: z.string(),
    runId: z.string(),
    sessionId: z.string().nullable(),
    name: z.string(),
    arguments: JsonObject.describe('What the model asked to run the tool with'),
    status: z
      .enum(['pending', 'approved', 'denied', 'expired', 'cancelled'])
      .describe('`cancelled`: the run ended (cancelled or failed) before a decision'),
    approvedArguments: JsonObject.nullable().describe('What the tool runs with, once approved'),
    reason: z.string().nullable().describe('The reason given with a denial'),
    deadline: z.string(),
    createdAt: z.string(),
    decidedAt: z.string().nullable(),
  })
  .meta({ id: 'ToolApproval' });

export const TurnRunEventSchema = z
  .object({
    type: z.literal('turn_run'),
    id: z.string(),
    status: z.string(),
    created_at: z.string(),
    completed_at: z.string().nullable(),
    error_message: z.string().nullable(),
    warnings: z
      .array(TurnWarningSchema)
      .describe('What the turn reported but survived, e.g. an unreachable MCP server (docs/agents.md)'),
    approvals: z
      .array(ToolApprovalSchema)
      .describe('Calls of the run that needed a person\'s decision (docs/agents.md, "Tool approval")'),
  })
  .meta({ id: 'SessionTurnRunEvent' });

export const SessionTimelineSchema = z
  .object({ events: z.array(z.union([MessageEventSchema, TurnRunEventSchema])) })
  .meta({ id: 'SessionTimeline' });

export const ToolResultInput = z
  .object({
    sessionId: z.string(),
    toolCallId: z.string({ error: 'toolCallId is required' }).min(1, 'toolCallId is required'),
    result: z.unknown().optional(),
    error: z.string().max(10_000).optional(),
  })
  .refine((v) => (v.result !== undefined) !== (v.error !== undefined), {
    message: 'Provide either result or error, not both',
  });

export const ToolResultResponseSchema = z
  .object({
    accepted: z.boolean(),
    sessionId: z.string(),
    toolCallId: z.string(),
    status: z.enum(['completed', 'failed', 'expired']),
  })
  .meta({ id: 'ToolResultAccepted' });

export const ToolApprovalInput = z.object({
  sessionId: z.string(),
  toolCallId: z.string({ error: 'toolCallId is required' }).min(1, 'toolCallId is required'),
  approved: z.boolean({ error: 'approved is required (true or false)' }),
  arguments: JsonObject.optional().describe(
    "With `approved: true`: replaces the model's arguments; checked against the tool's inputSchema",
  ),
  reason: z.string().max(2000).optional().describe('Told to the model with a denial'),
});

export const ToolApprovalResponseSchema = z
  .object({
    accepted: z.literal(true),
    sessionId: z.string(),
    toolCallId: z.string(),
    status: z.enum(['approved', 'denied']),
  })
  .meta({ id: 'ToolApprovalAccepted' });

export const CancelInput = z.object({
  sessionId: z.string(),
  runId: z.string({ error: 'runId is required' }).min(1, 'runId is required'),
});

export const CONCURRENCY_POLICIES = ['reject', 'queue', 'interrupt'] as const;

export const SendMessageInput = z.object({
  message: z.string({ error: 'message is required' }).trim().min(1, 'message is required').max(100_000),
  model: z.string().min(1).max(200).optional(),
  /** What to do when a turn is already running in the session (docs/agents.md). */
  concurrency: z.enum(CONCURRENCY_POLICIES).default('reject'),
});
export type SendMessageInputType = z.infer<typeof SendMessageInput>;
