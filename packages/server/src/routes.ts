import { agentRoutes } from './domains/agents/routes.js';
import { appsRawRoutes } from './domains/apps/routes.js';
import { artifactRoutes } from './domains/artifacts/routes.js';
import { chatRoutes } from './domains/chat/routes.js';
import { oidcRoutes } from './domains/identity/oidc-routes.js';
import { imageRoutes } from './domains/image/routes.js';
import { openAiRoutes } from './domains/openai/routes.js';
import { ragRoutes } from './domains/rag/routes.js';
import { storageRoutes } from './domains/storage/routes.js';
import type { RawRouteModule } from './http/raw-routes.js';

/** Every raw (SSE, multipart, file) route module of the API. Domains append theirs here. */
export const rawRouteModules: readonly RawRouteModule[] = [
  chatRoutes,
  storageRoutes,
  appsRawRoutes,
  agentRoutes,
  artifactRoutes,
  imageRoutes,
  ragRoutes,
  oidcRoutes,
  openAiRoutes,
];
