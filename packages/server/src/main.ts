import { ConfigError, loadConfig } from './config.js';
import { createLogger } from './logger.js';
import { loggerOptions } from './observability.js';
import { createServer } from './server.js';

async function main() {
  // Everything this process creates (the embedded database's files, stored objects, uploads
  // being imported) is private to its user; see src/data-dir.ts.
  process.umask(0o077);
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const log = createLogger(config.logLevel, loggerOptions(config.env));
  const server = await createServer({ config, logger: log });
  const { url, metricsUrl } = await server.listen();
  log.info(
    {
      url,
      metricsUrl,
      database: server.deps.db.kind,
      dataDir: config.databaseUrl ? undefined : config.dataDir,
    },
    `AI Suite listening on ${url} (API reference at ${url}/docs)`,
  );
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down');
    server.close().then(
      () => process.exit(0),
      (err) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((err) => {
  process.stderr.write(`Failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
