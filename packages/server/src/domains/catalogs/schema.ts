import { z } from 'zod';

const JsonSchemaObject = z.record(z.string(), z.unknown());

export const PackSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    version: z.string(),
    description: z.string().nullable(),
    sessionContextFields: z.array(z.string()),
    recommendedPlatformTools: z.array(z.string()),
  })
  .meta({ id: 'IntegrationPack' });

export const PackToolSchema = z
  .object({
    toolId: z.string(),
    name: z.string(),
    description: z.string(),
    executionMode: z.enum(['callback_sync', 'hitl_deferred']),
    inputSchema: JsonSchemaObject,
    outputSchema: JsonSchemaObject.nullable(),
  })
  .meta({ id: 'PackTool' });

export const PackSkillSchema = z
  .object({
    skillId: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    enabledByDefault: z.boolean(),
  })
  .meta({ id: 'PackSkill' });

export const PlatformToolSchema = z
  .object({
    toolId: z.string(),
    name: z.string(),
    description: z.string(),
    category: z.string().nullable(),
    executionKind: z.string(),
    implementationRef: z.string(),
    agentKinds: z.array(z.string()),
    runtimeModes: z.array(z.string()),
  })
  .meta({ id: 'PlatformTool' });

/** The files under data/: what the repo versions. Validated when loaded. */
export const PackFileSchema = z.object({
  catalogVersion: z.string(),
  packs: z.array(
    PackSchema.extend({
      active: z.boolean(),
      tools: z.array(PackToolSchema),
      skills: z.array(PackSkillSchema),
    }),
  ),
});

export const PlatformToolFileSchema = z.object({
  catalogVersion: z.string(),
  tools: z.array(
    PlatformToolSchema.extend({
      executionKind: z.string().default('builtin'),
      category: z.string().nullable().default(null),
      inputSchema: JsonSchemaObject,
    }),
  ),
});

export type PackRecord = z.infer<typeof PackFileSchema>['packs'][number];
export type PlatformToolRecord = z.infer<typeof PlatformToolFileSchema>['tools'][number];
export type PackTool = z.infer<typeof PackToolSchema>;
