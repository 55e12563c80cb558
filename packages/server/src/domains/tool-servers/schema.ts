import { z } from 'zod';

export const ToolServerSchema = z
  .object({
    id: z.string(),
    workspaceId: z.string(),
    name: z.string(),
    url: z.string(),
    enabled: z.boolean().describe('Disabled servers are not offered to any agent turn'),
    authHeaderName: z
      .string()
      .nullable()
      .describe('The header sent with the stored secret (its value is never shown)'),
    tools: z
      .array(z.object({ name: z.string(), description: z.string().nullable() }))
      .describe('The tools the server listed when it was connected'),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'ToolServer' });

export const ConnectToolServerInput = z.object({
  workspaceId: z.string(),
  name: z
    .string({ error: 'name is required' })
    .regex(
      /^[a-zA-Z0-9_-]{1,32}$/,
      'name is 1 to 32 letters, digits, "_" or "-" (it prefixes the tool names)',
    ),
  url: z.string({ error: 'url is required' }).max(2048, 'url must be 2048 characters or less'),
  authHeader: z
    .object({
      name: z
        .string()
        .regex(/^[A-Za-z0-9-]{1,64}$/, 'authHeader.name must be an HTTP header name')
        .default('Authorization'),
      value: z
        .string({ error: 'authHeader.value is required' })
        .min(1, 'authHeader.value is required')
        .max(4096, 'authHeader.value must be 4096 characters or less')
        .regex(/^[^\r\n]*$/, 'authHeader.value must be one line'),
    })
    .optional()
    .describe('Sent with every request to the server (e.g. `{"value":"Bearer …"}`); stored encrypted'),
});

export const UpdateToolServerInput = z.object({
  workspaceId: z.string(),
  toolServerId: z.string(),
  enabled: z.boolean({ error: 'enabled must be true or false' }),
});
