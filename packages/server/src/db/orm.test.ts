import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../test/harness.js';
import { migrationsList } from './migrations/index.js';
import { type Database, openDatabase, pendingMigrations } from './orm.js';

let tdb: TestDatabase;
const open = () => openDatabase({ databaseUrl: tdb.databaseUrl, embedded: tdb.embedded, poolMax: 2 });
beforeAll(async () => {
  tdb = await createTestDatabase();
  // The first open migrates what is pending (on the PostgreSQL server: everything).
  await (await open()).close();
});
afterAll(() => tdb?.drop());

describe('migrations at start (decision 0019)', () => {
  let db: Database;
  beforeAll(async () => {
    db = await open();
  });
  afterAll(() => db?.close());

  it("with nothing pending, one query decides and MikroORM's Migrator is not loaded", async () => {
    expect(await pendingMigrations(db.orm)).toEqual([]);
    expect(db.orm.config.getExtension('@mikro-orm/migrator')).toBeUndefined();
  });

  it('lists a migration missing from the migrations table', async () => {
    const last = migrationsList.at(-1)?.name as string;
    const em = db.orm.em.fork();
    const [row] = await em.execute<{ id: number; name: string; executed_at: Date }[]>(
      'select id, name, executed_at from mikro_orm_migrations where name = ?',
      [last],
    );
    expect(row).toBeDefined();
    await em.execute('delete from mikro_orm_migrations where id = ?', [row?.id]);
    try {
      expect(await pendingMigrations(db.orm)).toEqual([last]);
    } finally {
      await em.execute('insert into mikro_orm_migrations (id, name, executed_at) values (?, ?, ?)', [
        row?.id,
        row?.name,
        row?.executed_at,
      ]);
    }
    expect(await pendingMigrations(db.orm)).toEqual([]);
  });
});
