import { generateOpenApiDocument, type OpenAPIObject } from 'trpc-to-openapi';
import type { ZodOpenApiPathsObject } from 'zod-openapi';
import type { Meta } from '../trpc.js';
import { ErrorBodySchema } from './errors.js';
import { describeConstraints } from './openapi-constraints.js';
import { SECURITY_SCHEMES, securityFor } from './openapi-security.js';
import type { RawRouteModule } from './raw-routes.js';

export const API_VERSION = '1.0.0';

/** The tRPC router whose procedures the document describes (the composition root's `appRouter`). */
export type ApiRouter = Parameters<typeof generateOpenApiDocument>[0];

/** The meta of every procedure with an OpenAPI path, by `method path`. */
function procedureMetas(appRouter: ApiRouter): Map<string, Meta> {
  const out = new Map<string, Meta>();
  const procs = (appRouter._def as unknown as { procedures: Record<string, { _def: { meta?: Meta } }> })
    .procedures;
  for (const proc of Object.values(procs)) {
    const meta = proc._def.meta;
    if (meta?.openapi) out.set(`${meta.openapi.method.toLowerCase()} ${meta.openapi.path}`, meta);
  }
  return out;
}

const errorRef = { $ref: '#/components/schemas/ErrorBody' };

/**
 * The OpenAPI 3.1 document of every /api/v1 operation: tRPC procedures and raw routes.
 * Post-processed so every error response references the one `ErrorBody` schema, created
 * resources answer 201, and every limit is also said in words in its description.
 */
export function buildOpenApiDocumentOf(
  appRouter: ApiRouter,
  rawRouteModules: readonly RawRouteModule[],
): OpenAPIObject {
  const paths: ZodOpenApiPathsObject = {};
  for (const mod of rawRouteModules) {
    for (const [p, item] of Object.entries(mod.openapi)) {
      paths[p] = { ...(paths[p] ?? {}), ...item };
    }
  }
  const doc = generateOpenApiDocument(appRouter, {
    title: 'AI Suite API',
    version: API_VERSION,
    openApiVersion: '3.1.0',
    baseUrl: '/api/v1',
    description:
      'Workspace-scoped AI service: chat, managed agents, apps, storage and catalogs. Every error body is `{ error, code?, details? }`.',
    securitySchemes: SECURITY_SCHEMES as unknown as Parameters<
      typeof generateOpenApiDocument
    >[1]['securitySchemes'],
    paths,
    defs: { ErrorBody: ErrorBodySchema },
  });
  const metas = procedureMetas(appRouter);
  for (const [p, item] of Object.entries(doc.paths ?? {})) {
    for (const [method, op] of Object.entries(item as Record<string, unknown>)) {
      const operation = op as { responses?: Record<string, unknown>; security?: unknown } | undefined;
      if (!operation?.responses) continue;
      const meta = metas.get(`${method} ${p}`);
      // The credentials a procedure accepts, as its builder (`procedureFor`) recorded them.
      if (meta?.principals) operation.security = securityFor(meta.principals);
      const created = meta?.status;
      if (created && operation.responses['200']) {
        operation.responses[String(created)] = operation.responses['200'];
        delete operation.responses['200'];
      }
      for (const [status, resp] of Object.entries(operation.responses)) {
        if (Number(status) >= 400 || status === 'default') {
          const description = (resp as { description?: string }).description ?? 'Error';
          operation.responses[status] = {
            description,
            content: { 'application/json': { schema: errorRef } },
          };
        }
      }
    }
  }
  describeConstraints(doc);
  return doc;
}
