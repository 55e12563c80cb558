import { MikroORM, type Options } from '@mikro-orm/core';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import {
  type EmbeddedPostgres,
  type EmbeddedThread,
  findEmbeddedOwner,
  lockHolder,
  startEmbeddedPostgres,
} from './embedded.js';
import { EMBEDDED_EXTENSIONS } from './extensions.js';
import { migrationsList } from './migrations/index.js';
import { COMMIT_BARRIER_ALLOWED_SQL, SqlPool } from './sql.js';

export type Orm = MikroORM<PostgreSqlDriver>;

/** What `openDatabase` hands to the ORM's `entities` option. */
export type EntityList = NonNullable<Options['entities']>;

export interface Database {
  orm: Orm;
  /** `embedded` when this process talks to PGlite (its own or another process's). */
  kind: 'embedded' | 'server';
  /** Set only when this process owns the embedded database. */
  embedded?: EmbeddedPostgres;
  /**
   * True when another process owns the embedded database and this one is connected to it
   * through the owner's socket (the operator CLI while the server runs).
   */
  attached: boolean;
  /** A plain `pg` pool on the same database, for the request hot path (`db/sql.ts`). */
  sql: SqlPool;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  /**
   * The entities the ORM maps, handed over by the composition root (`src/entities.ts`); none
   * for a caller that only migrates or runs SQL.
   */
  entities?: EntityList;
  databaseUrl?: string;
  dataDir?: string;
  /** An embedded database already started by the caller (tests); not closed by `close()`. */
  embedded?: EmbeddedPostgres;
  /**
   * Apply pending migrations (default true). Never done when attached to another process's
   * embedded database: the owner migrated at its start, and a schema this code does not
   * know is refused instead.
   */
  migrate?: boolean;
  /** Connections of the ORM's pool (default 10). */
  poolMax?: number;
  /** Connections of the plain pool of the hot paths (`db/sql.ts`; default `poolMax`). */
  hotPoolMax?: number;
  /** Whether that pool pipelines its statements on a PostgreSQL server (default true; `db/pipelined-pool.ts`). */
  hotPoolPipeline?: boolean;
  debug?: boolean;
  /**
   * Who opens the embedded database (default `server`). A server that finds the data
   * directory held by a CLI command waits for it to finish and then becomes the owner, rather
   * than attaching to a process about to exit.
   */
  as?: 'server' | 'cli';
  /** Where the image of a fresh database is cached (`startEmbeddedPostgres`' `imageDir`). */
  imageDir?: string | false;
  /** Where the engine of an embedded database this opens runs (`startEmbeddedPostgres`' `thread`). */
  embeddedThread?: EmbeddedThread;
}

const CLI_WAIT_MS = 60_000;
const MIGRATIONS_TABLE = 'mikro_orm_migrations';

/**
 * The migrations of `migrationsList` not recorded in the migrations table (all of them when it
 * does not exist yet). One query: on a start with nothing to do, `@mikro-orm/migrations` (its
 * `Migrator`, umzug, the generators) is never loaded.
 */
export async function pendingMigrations(orm: Orm): Promise<string[]> {
  const [table] = await orm.em
    .getConnection()
    .execute<{ t: string | null }[]>('select to_regclass(?)::text as t', [MIGRATIONS_TABLE]);
  if (!table?.t) return migrationsList.map((m) => m.name);
  const rows = await orm.em
    .getConnection()
    .execute<{ name: string }[]>(`select name from ${MIGRATIONS_TABLE}`);
  const applied = new Set(rows.map((r) => r.name));
  return migrationsList.map((m) => m.name).filter((n) => !applied.has(n));
}

/** Applies the pending migrations, loading MikroORM's Migrator only when there are some. */
async function migrateIfPending(orm: Orm): Promise<void> {
  if ((await pendingMigrations(orm)).length === 0) return;
  const { Migrator } = await import('@mikro-orm/migrations');
  Migrator.register(orm);
  await orm.migrator.up();
}

async function initOrm(
  connection: { clientUrl: string } | { host: string; port: number },
  poolMax: number,
  debug: boolean,
  entities: EntityList,
): Promise<Orm> {
  return MikroORM.init({
    driver: PostgreSqlDriver,
    ...('clientUrl' in connection
      ? { clientUrl: connection.clientUrl }
      : { host: connection.host, port: connection.port, user: 'postgres', dbName: 'postgres' }),
    entities,
    // The Migrator is registered when a migration is pending (`migrateIfPending`).
    migrations: {
      migrationsList,
      transactional: true,
      allOrNothing: true,
      snapshot: false,
      tableName: MIGRATIONS_TABLE,
      silent: true,
    },
    pool: { min: 0, max: poolMax },
    allowGlobalContext: false,
    discovery: { warnWhenNoEntities: false },
    debug,
    ensureDatabase: false,
  });
}

/**
 * Opens the system of record: a PostgreSQL server when `databaseUrl` is given, otherwise the
 * embedded PGlite under `dataDir` (or the caller's `embedded` instance). When another process
 * already owns that data directory, this one connects through the owner's socket.
 */
export async function openDatabase(opts: OpenDatabaseOptions): Promise<Database> {
  const poolMax = opts.poolMax ?? 10;
  const hotPoolMax = opts.hotPoolMax ?? poolMax;
  const debug = opts.debug ?? process.env.ORM_DEBUG === '1';
  const entities = opts.entities ?? [];
  let orm: Orm;
  let owned: EmbeddedPostgres | undefined;
  let kind: Database['kind'] = 'embedded';
  let attached = false;
  let connection: { clientUrl: string } | { host: string; port: number };
  if (opts.databaseUrl) {
    kind = 'server';
    connection = { clientUrl: opts.databaseUrl };
    orm = await initOrm(connection, poolMax, debug, entities);
  } else if (opts.embedded) {
    connection = { host: opts.embedded.socketDir, port: opts.embedded.port };
    orm = await initOrm(connection, poolMax, debug, entities);
  } else {
    if (!opts.dataDir) throw new Error('openDatabase needs databaseUrl, dataDir or embedded');
    const deadline = Date.now() + CLI_WAIT_MS;
    for (
      let holder = lockHolder(opts.dataDir);
      holder?.kind === 'cli' && (opts.as ?? 'server') === 'server';
    ) {
      if (Date.now() > deadline) {
        throw new Error(
          `The embedded database in ${opts.dataDir} is held by an operator CLI command (pid ${holder.pid}); start again when it has finished.`,
        );
      }
      await new Promise((r) => setTimeout(r, 200));
      holder = lockHolder(opts.dataDir);
    }
    const owner = await findEmbeddedOwner(opts.dataDir);
    if (owner) {
      attached = true;
      connection = { host: owner.socketDir, port: owner.port };
      orm = await initOrm(connection, poolMax, debug, entities);
    } else {
      owned = await startEmbeddedPostgres({
        dataDir: opts.dataDir,
        ownerKind: opts.as ?? 'server',
        extensions: EMBEDDED_EXTENSIONS,
        imageDir: opts.imageDir,
        thread: opts.embeddedThread,
      });
      connection = { host: owned.socketDir, port: owned.port };
      try {
        orm = await initOrm(connection, poolMax, debug, entities);
      } catch (err) {
        await owned.close();
        throw err;
      }
    }
  }
  try {
    if (attached) {
      const pending = await pendingMigrations(orm);
      if (pending.length > 0) {
        throw new Error(
          `The process serving the embedded database in ${opts.dataDir} runs an older schema ` +
            `(${pending.length} migration(s) pending): restart it with this version first.`,
        );
      }
    } else if (opts.migrate ?? true) {
      await migrateIfPending(orm);
    }
  } catch (err) {
    await orm.close(true);
    await owned?.close();
    throw err;
  }
  // Asynchronous commits with a shared flush before answering (decision 0032) need the
  // barrier's function; without it, the statements that would use it commit synchronously.
  const commitBarrier =
    kind === 'server' &&
    (
      await orm.em
        .getConnection()
        .execute<{ allowed: boolean }[]>(COMMIT_BARRIER_ALLOWED_SQL)
        .catch(() => [{ allowed: false }])
    )[0]?.allowed === true;
  const sql = new SqlPool(
    'clientUrl' in connection
      ? { connectionString: connection.clientUrl, max: hotPoolMax }
      : {
          host: connection.host,
          port: connection.port,
          user: 'postgres',
          database: 'postgres',
          max: hotPoolMax,
        },
    kind,
    { pipeline: opts.hotPoolPipeline ?? true, commitBarrier },
  );
  return {
    orm,
    kind,
    attached,
    sql,
    embedded: owned ?? opts.embedded,
    async close() {
      await sql.close();
      await orm.close(true);
      await owned?.close();
    },
  };
}
