import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Express } from 'express';
import type { Logger } from 'pino';
import { createApp } from './app.js';
import { prepareDummyHash } from './auth/passwords.js';
import { identitySettingsFromEnv } from './auth/settings.js';
import { ensureSigningSecret } from './auth/signing-secret.js';
import { type Config, loadConfig } from './config.js';
import type { ServerDeps } from './context.js';
import { prepareDataDir } from './data-dir.js';
import type { EmbeddedPostgres } from './db/embedded.js';
import { type Database, openDatabase } from './db/orm.js';
import { emExecutor } from './db/sql.js';
import { registerAgentRuntime } from './domains/agents/runtime.js';
import { closeDocumentPool } from './domains/rag/document-pool.js';
import { registerRagIndexing } from './domains/rag/indexing.js';
import { registerAutonomousRuns } from './domains/runs/runtime.js';
import { registerScheduleTicker } from './domains/schedules/runtime.js';
import { runHeadlessInit } from './domains/workspaces/init.js';
import { allEntities } from './entities.js';
import { createRequestListener } from './http/fast-path.js';
import { createLogger } from './logger.js';
import { PgMetering } from './metering/service.js';
import { meteringSettingsFromEnv } from './metering/settings.js';
import { loggerOptions, observedListener, registerGaugeSources, startTelemetry } from './observability.js';
import { createAiDeps } from './providers/setup.js';
import { rawRouteModules } from './routes.js';
import { createRunEngine } from './runs/index.js';
import { createObjectStore } from './storage/index.js';
import { listenMetrics } from './telemetry/listener.js';
import { metrics } from './telemetry/metrics.js';

export interface CreateServerOptions {
  /** Environment to read the configuration from (default `process.env`). */
  env?: Record<string, string | undefined>;
  config?: Config;
  /** An embedded database started by the caller (tests); left open on close. */
  embedded?: EmbeddedPostgres;
  logger?: Logger;
}

export interface RunningServer {
  url: string;
  port: number;
  http: http.Server;
  /** The Prometheus endpoint's URL, when `METRICS_PORT` is set. */
  metricsUrl?: string;
}

export interface AiSuiteServer {
  app: Express;
  deps: ServerDeps;
  /** Starts listening (port 0 picks a free one). */
  listen(port?: number, host?: string): Promise<RunningServer>;
  /** Stops accepting, lets requests finish within the grace period, closes the database. */
  close(): Promise<void>;
}

export async function createServer(opts: CreateServerOptions = {}): Promise<AiSuiteServer> {
  const config = opts.config ?? loadConfig(opts.env);
  // Metrics and tracing first: the model provider and the logger are built for them.
  const telemetry = await startTelemetry(config);
  const log = opts.logger ?? createLogger(config.logLevel, loggerOptions(config.env));
  let em: () => EntityManager = () => {
    throw new Error('database not open yet');
  };
  // Model and metering configuration errors fail the start, before the database opens.
  const ai = createAiDeps(config);
  const metering = new PgMetering(() => emExecutor(em()), meteringSettingsFromEnv(config.env));
  const identity = identitySettingsFromEnv(config.env);
  void prepareDummyHash();
  // DATA_DIR holds stored objects and uploads being imported whatever the database.
  prepareDataDir(config.dataDir);
  const db: Database = await openDatabase({
    entities: allEntities,
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    embedded: opts.embedded,
    poolMax: config.databasePoolMax,
    hotPoolMax: config.databaseHotPoolMax,
    hotPoolPipeline: config.databaseHotPoolPipeline,
    embeddedThread: config.embeddedDatabaseThread,
  });
  em = () => db.orm.em.fork() as unknown as EntityManager;
  try {
    config.signingSecret = await ensureSigningSecret(em(), config.signingSecret);
    await runHeadlessInit(em(), config, log);
  } catch (err) {
    await db.close();
    throw err;
  }
  // Signed links of the embedded store point at PUBLIC_BASE_URL, else at the listening address.
  let listeningUrl = `http://127.0.0.1:${config.port}`;
  const objects = await createObjectStore(config, () => config.publicBaseUrl ?? listeningUrl);
  try {
    // A missing bucket or refused credentials stop the start with the reason, rather than
    // surfacing as a 500 at the first upload.
    await objects.check();
  } catch (err) {
    await db.close();
    throw err;
  }
  const runs = createRunEngine({ config, log, em, sql: db.sql, onSweep: () => metering.settleExpired() });
  const poolMetering = metering.using(db.sql, { batchUsage: true, batchAdmissions: true });
  const deps: ServerDeps = { config, db, log, em, identity, ...ai, metering, poolMetering, objects, runs };
  registerAgentRuntime(deps);
  const autonomous = registerAutonomousRuns(deps);
  registerRagIndexing(deps);
  await runs.start();
  const unregisterGauges = registerGaugeSources(deps);
  const scheduleTicker = registerScheduleTicker(deps);
  const app = createApp(deps);
  let server: http.Server | undefined;
  let metricsListener: { url: string; close(): Promise<void> } | undefined;
  let closing: Promise<void> | undefined;

  return {
    app,
    deps,
    async listen(port = config.port, host = config.host) {
      if (metrics && config.metricsPort !== undefined && !metricsListener) {
        metricsListener = await listenMetrics(metrics, config.metricsPort, config.metricsHost);
      }
      const metricsUrl = metricsListener?.url;
      return new Promise((resolve, reject) => {
        const srv = http.createServer(observedListener(createRequestListener(app, deps, rawRouteModules)));
        srv.keepAliveTimeout = 65_000;
        srv.once('error', reject);
        srv.listen(port, host, config.listenBacklog, () => {
          server = srv;
          const addr = srv.address() as AddressInfo;
          const shownHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
          listeningUrl = `http://${shownHost}:${addr.port}`;
          resolve({ url: `http://${shownHost}:${addr.port}`, port: addr.port, http: srv, metricsUrl });
        });
      });
    },
    close() {
      closing ??= (async () => {
        if (server) {
          const srv = server;
          const done = new Promise<void>((r) => srv.close(() => r()));
          srv.closeIdleConnections();
          const timer = setTimeout(() => {
            log.warn(
              { graceMs: config.shutdownGraceMs },
              'shutdown grace period elapsed: closing the connections still open',
            );
            srv.closeAllConnections();
          }, config.shutdownGraceMs);
          timer.unref();
          await done;
          clearTimeout(timer);
        }
        await metricsListener?.close();
        unregisterGauges();
        await scheduleTicker.stop();
        await autonomous.stop();
        await runs.stop();
        await closeDocumentPool(deps);
        await poolMetering.close();
        await db.close();
        await telemetry.tracing?.flush().catch(() => {});
      })();
      return closing;
    },
  };
}
