import { createRequire } from 'node:module';
import path from 'node:path';
import type { Migration as MikroMigration } from '@mikro-orm/migrations';

/**
 * MikroORM's `Migration` base class, loaded alone. `@mikro-orm/migrations`'s entry point also
 * loads the `Migrator` with umzug and the migration generators, which a start needs only when a
 * migration is pending (`db/orm.ts` checks the migrations table first). The file is the very
 * one that entry point re-exports (same module instance).
 */
const require = createRequire(import.meta.url);
const dir = path.dirname(require.resolve('@mikro-orm/migrations'));
export const Migration: typeof MikroMigration = (
  require(path.join(dir, 'Migration.js')) as { Migration: typeof MikroMigration }
).Migration;
