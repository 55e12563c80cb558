import { agentsRouter } from './domains/agents/router.js';
import { appsRouter } from './domains/apps/router.js';
import { catalogsRouter } from './domains/catalogs/router.js';
import { identityRouter } from './domains/identity/router.js';
import { insightsRouter } from './domains/insights/router.js';
import { modelsRouter } from './domains/models/router.js';
import { runsRouter } from './domains/runs/router.js';
import { storageRouter } from './domains/storage/router.js';
import { widgetTokensRouter } from './domains/widget-tokens/router.js';
import { workspacesRouter } from './domains/workspaces/router.js';
import { router } from './trpc.js';

/** Every tRPC procedure of the API, each exposed as REST under /api/v1. */
export const appRouter = router({
  workspaces: workspacesRouter,
  identity: identityRouter,
  catalogs: catalogsRouter,
  agents: agentsRouter,
  storage: storageRouter,
  apps: appsRouter,
  widgetTokens: widgetTokensRouter,
  runs: runsRouter,
  insights: insightsRouter,
  models: modelsRouter,
});

export type AppRouter = typeof appRouter;
