import type { OpenAPIObject } from 'trpc-to-openapi';
import { buildOpenApiDocumentOf } from './http/openapi-doc.js';
import { appRouter } from './router.js';
import { rawRouteModules } from './routes.js';

/** The OpenAPI document of every /api/v1 operation: the tRPC procedures and the raw routes. */
export function buildOpenApiDocument(): OpenAPIObject {
  return buildOpenApiDocumentOf(appRouter, rawRouteModules);
}
