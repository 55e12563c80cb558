import express, { type Express } from 'express';
import helmet from 'helmet';
import type { ServerDeps } from './context.js';
import { appError } from './errors/index.js';
import { consoleRouter } from './http/console.js';
import { docsRouter } from './http/docs.js';
import { errorHandler, sendError } from './http/errors.js';
import { jsonBodyParser } from './http/json-body.js';
import { OPENAPI_MAX_BODY, openApiHandler } from './http/openapi-handler.js';
import { mountRawRoutes } from './http/raw-routes.js';
import { requestId } from './http/request-id.js';
import { requestLog } from './http/request-log.js';
import { apiHelmet } from './http/security.js';
import { buildOpenApiDocument } from './openapi.js';
import { appRouter } from './router.js';
import { rawRouteModules } from './routes.js';

/** Assembles the express application. No I/O here: `createServer` owns start-up. */
export function createApp(deps: ServerDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', deps.config.trustProxy);
  app.set('etag', false);
  app.use(requestId);
  app.use(requestLog(deps));

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.get('/readyz', async (_req, res) => {
    const [database, objectStore] = await Promise.all([
      deps
        .em()
        .execute('select 1')
        .then(
          () => null,
          () => 'database unreachable',
        ),
      deps.objects.check().then(
        () => null,
        (err: Error) => err.message,
      ),
    ]);
    if (database || objectStore) {
      const details = { ...(database ? { database } : {}), ...(objectStore ? { objectStore } : {}) };
      res.status(503).json({ error: 'Service temporarily unavailable', details });
      return;
    }
    res.json({ status: 'ready', database: deps.db.kind, objectStore: deps.objects.kind });
  });

  let doc: ReturnType<typeof buildOpenApiDocument> | undefined;
  app.get('/api/v1/openapi.json', (_req, res) => {
    doc ??= buildOpenApiDocument();
    res.json(doc);
  });
  app.use('/docs', helmet({ contentSecurityPolicy: false }), docsRouter('/api/v1/openapi.json'));

  app.use('/api/v1', apiRouter(deps));
  // The same API for the web console: the signed-in person's session is the principal of
  // every route (decision 0025); /api/v1 keeps spec 5's rules.
  app.use(
    CONSOLE_API_PATH,
    (req, _res, next) => {
      req.consoleApi = true;
      next();
    },
    apiRouter(deps),
  );
  app.use(consoleRouter(deps.config.consoleDir));

  // Anything else, including other versions under /api: 404 with the standard body.
  app.use((_req, res) => sendError(res, appError('NOT_FOUND')));
  app.use(errorHandler(deps.log));
  return app;
}

/** Where the web console reaches the API with its session cookie. */
export const CONSOLE_API_PATH = '/console-api/v1';

function apiRouter(deps: ServerDeps): express.Router {
  const v1 = express.Router();
  v1.use(apiHelmet());
  mountRawRoutes(v1, rawRouteModules, deps);
  // JSON bodies are parsed here, not by trpc-to-openapi, so one nested too deep is refused
  // before tRPC serialises it (JSON.stringify overflowed the stack at 10,000 levels).
  v1.use(jsonBodyParser(OPENAPI_MAX_BODY));
  v1.use(openApiHandler(appRouter, deps));
  return v1;
}
