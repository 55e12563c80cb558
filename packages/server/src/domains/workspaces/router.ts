import { z } from 'zod';
import { keyProcedure, router } from '../../trpc.js';

export const MeSchema = z
  .object({
    workspace: z.object({ id: z.string(), name: z.string() }),
    apiKey: z.object({ id: z.string(), name: z.string().nullable() }),
  })
  .meta({ id: 'Me' });

export const workspacesRouter = router({
  me: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/me',
        tags: ['Workspace'],
        protect: true,
        summary: 'The workspace and key behind the bearer key (extension of the spec)',
        description:
          'Extension: not in the interface specification. Lets a caller holding only an API key learn its workspace id, which the workspace-scoped paths (storage, insights) need.',
      },
    })
    .input(z.void())
    .output(MeSchema)
    .query(({ ctx }) => ({
      workspace: { id: ctx.principal.workspaceId, name: ctx.principal.workspaceName },
      apiKey: { id: ctx.principal.keyId ?? '', name: ctx.principal.keyName ?? null },
    })),
});
