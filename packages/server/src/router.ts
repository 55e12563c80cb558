import { agentsRouter } from './domains/agents/router.js';
import { apiKeysRouter } from './domains/api-keys/router.js';
import { appsRouter } from './domains/apps/router.js';
import { catalogsRouter } from './domains/catalogs/router.js';
import { identityRouter } from './domains/identity/router.js';
import { insightsRouter } from './domains/insights/router.js';
import { membersRouter } from './domains/members/router.js';
import { modelsRouter } from './domains/models/router.js';
import { ragRouter } from './domains/rag/router.js';
import { runsRouter } from './domains/runs/router.js';
import { schedulesRouter } from './domains/schedules/router.js';
import { storageRouter } from './domains/storage/router.js';
import { toolServersRouter } from './domains/tool-servers/router.js';
import { widgetTokensRouter } from './domains/widget-tokens/router.js';
import { workspacesRouter } from './domains/workspaces/router.js';
import { router } from './trpc.js';

/** Every tRPC procedure of the API, each exposed as REST under /api/v1. */
export const appRouter = router({
  workspaces: workspacesRouter,
  identity: identityRouter,
  apiKeys: apiKeysRouter,
  members: membersRouter,
  toolServers: toolServersRouter,
  catalogs: catalogsRouter,
  agents: agentsRouter,
  storage: storageRouter,
  apps: appsRouter,
  widgetTokens: widgetTokensRouter,
  runs: runsRouter,
  schedules: schedulesRouter,
  insights: insightsRouter,
  models: modelsRouter,
  rag: ragRouter,
});

export type AppRouter = typeof appRouter;
