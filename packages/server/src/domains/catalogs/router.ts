import { z } from 'zod';
import { publicProcedure, router } from '../../trpc.js';
import { PackSchema, PackSkillSchema, PackToolSchema, PlatformToolSchema } from './schema.js';
import { catalogService } from './service.js';

export const catalogsRouter = router({
  listPacks: publicProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/integration-packs',
        tags: ['Catalogs'],
        summary: 'List active integration packs (public)',
      },
    })
    .input(z.void())
    .output(z.object({ packs: z.array(PackSchema) }))
    .query(() => ({ packs: catalogService.listPacks() })),

  getPack: publicProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/integration-packs/{packId}',
        tags: ['Catalogs'],
        summary: 'Get an integration pack with its tools and skills (public)',
        errorResponses: { 404: 'Pack not found' },
      },
    })
    .input(z.object({ packId: z.string() }))
    .output(z.object({ pack: PackSchema, tools: z.array(PackToolSchema), skills: z.array(PackSkillSchema) }))
    .query(({ input }) => catalogService.getPack(input.packId)),

  listPlatformTools: publicProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/platform-tools',
        tags: ['Catalogs'],
        summary: 'List platform tools (public), optionally filtered',
      },
    })
    .input(
      z.object({
        agentKind: z.string().optional(),
        runtimeMode: z
          .enum(['assist', 'autonomous'], {
            error: 'runtimeMode must be one of: assist, autonomous',
          })
          .optional(),
      }),
    )
    .output(z.object({ tools: z.array(PlatformToolSchema) }))
    .query(({ input }) => ({ tools: catalogService.listPlatformTools(input) })),
});
