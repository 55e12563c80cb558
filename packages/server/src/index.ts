export { type Config, loadConfig } from './config.js';
export { type EmbeddedPostgres, startEmbeddedPostgres } from './db/embedded.js';
export { type Database, openDatabase } from './db/orm.js';
export { WorkspacesService } from './domains/workspaces/service.js';
export { buildOpenApiDocument } from './openapi.js';
export { type AppRouter, appRouter } from './router.js';
export { type AiSuiteServer, type CreateServerOptions, createServer } from './server.js';
