import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { IdentitySettings } from './auth/settings.js';
import type { Config } from './config.js';
import type { Database } from './db/orm.js';
import type { Metering } from './metering/types.js';
import type { LlmProvider, ModelCatalog } from './providers/llm.js';
import type { RunEngine } from './runs/engine.js';
import type { ObjectStore } from './storage/object-store.js';

/**
 * What every request and background job can reach. Built once at start by `createServer`;
 * capability domains add their services here.
 */
export interface ServerDeps {
  config: Config;
  db: Database;
  log: Logger;
  /** A fresh entity manager for one unit of work (request, job, stream). */
  em(): EntityManager;
  /** Sign-in, sessions, invitations and OIDC settings (`AUTH_*`, `OIDC_*`). */
  identity: IdentitySettings;
  /** The durable run engine (agent turns, autonomous runs). */
  runs: RunEngine;
  /** Configured models (MODELS_FILE or OPENAI_* / CHAT_MODEL env). */
  models: ModelCatalog;
  /** Calls OpenAI-compatible models. */
  llm: LlmProvider;
  /** Token quota, credits, rate limits and usage records. */
  metering: Metering;
  /**
   * The same metering on the plain pool (`db.sql`) with batched usage records: for hot paths
   * outside any ORM transaction (`POST /chat`). Closed (pending records written) at shutdown.
   */
  poolMetering: Metering;
  /** The one object store (S3 or `DATA_DIR/objects`): uploads, images, deliverables. */
  objects: ObjectStore;
}
