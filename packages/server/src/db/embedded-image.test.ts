import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedPostgres } from './embedded.js';
import { embeddedImageKey, embeddedImagePath, writeImage } from './embedded-image.js';
import { EMBEDDED_EXTENSIONS } from './extensions.js';
import { migrationsList } from './migrations/index.js';
import { openDatabase } from './orm.js';

/**
 * A fresh data directory is extracted from the cached image of a migrated database when a
 * valid one matches the current code; a corrupt or stale image is never used
 * (docs/decisions/0019-lean-embedded-database.md, item 8). These tests run on the embedded
 * database whatever DATABASE_URL says: the image is the embedded database's.
 */
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-image-'));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

/** A migrated database with a `marker` table (so a start from it is recognisable), as a tar. */
async function markedImage(): Promise<Uint8Array> {
  const embedded = await startEmbeddedPostgres({ extensions: EMBEDDED_EXTENSIONS });
  try {
    const db = await openDatabase({ embedded, migrate: true, poolMax: 1 });
    await db.close();
    await embedded.exec('create table marker (id int); checkpoint;');
    return new Uint8Array(await (await embedded.dumpDataDir('none')).arrayBuffer());
  } finally {
    await embedded.close();
  }
}

/** Starts the embedded database on a new data directory; what the start made of it. */
async function freshStart(imageDir: string) {
  const dataDir = fs.mkdtempSync(path.join(root, 'data-'));
  const db = await openDatabase({ dataDir, imageDir });
  try {
    const [marker] = await db.orm.em
      .getConnection()
      .execute<{ t: string | null }[]>(`select to_regclass('marker')::text as t`);
    const applied = await db.orm.em
      .getConnection()
      .execute<{ name: string }[]>('select name from mikro_orm_migrations order by id');
    return { dataDir, marked: marker?.t === 'marker', applied: applied.map((r) => r.name) };
  } finally {
    await db.close();
  }
}

const modes = (dir: string): string[] => {
  const wrong: string[] = [];
  for (const entry of fs.readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const p = path.join(entry.parentPath, entry.name);
    const mode = fs.statSync(p).mode & 0o777;
    if (mode !== (entry.isDirectory() ? 0o700 : 0o600)) wrong.push(`${p} ${mode.toString(8)}`);
  }
  return wrong;
};

describe('the image of a fresh embedded database', () => {
  let marked: Uint8Array;
  beforeAll(async () => {
    marked = await markedImage();
  }, 480_000);

  it('a fresh data directory starts from a valid image of the current migrations', async () => {
    const imageDir = path.join(root, 'valid');
    writeImage(embeddedImagePath(imageDir, await embeddedImageKey()), marked);

    const start = await freshStart(imageDir);
    expect(start.marked).toBe(true);
    expect(start.applied).toEqual(migrationsList.map((m) => m.name));
    expect(modes(path.join(start.dataDir, 'pgdata'))).toEqual([]);
    // The image stays for the next fresh directory.
    expect(fs.readdirSync(imageDir)).toEqual([
      path.basename(embeddedImagePath(imageDir, await embeddedImageKey())),
    ]);
  }, 480_000);

  it('a corrupt image is replaced and a stale one ignored: initdb and the migrations run instead', async () => {
    const imageDir = path.join(root, 'broken');
    const current = embeddedImagePath(imageDir, await embeddedImageKey());
    // The image of the current key, cut short (its gzip length and CRC no longer match)…
    const valid = zlib.gzipSync(marked, { level: 1 });
    fs.mkdirSync(imageDir, { recursive: true });
    fs.writeFileSync(current, valid.subarray(0, Math.floor(valid.length / 2)));
    // …and a complete image made for other migrations (one fewer): another key.
    const olderKey = await embeddedImageKey(migrationsList.slice(0, -1));
    expect(olderKey).not.toBe(await embeddedImageKey());
    const stale = embeddedImagePath(imageDir, olderKey);
    fs.writeFileSync(stale, valid);
    // …and what a writer killed an hour ago left.
    const leftover = `${current}.tmp-999999`;
    fs.writeFileSync(leftover, valid.subarray(0, 1000));
    const anHourAgo = new Date(Date.now() - 3_600_000);
    fs.utimesSync(leftover, anHourAgo, anHourAgo);

    const start = await freshStart(imageDir);
    expect(start.marked).toBe(false);
    expect(start.applied).toEqual(migrationsList.map((m) => m.name));
    expect(modes(path.join(start.dataDir, 'pgdata'))).toEqual([]);
    // The initdb child cached a valid image of the current key and removed the others.
    expect(fs.readdirSync(imageDir)).toEqual([path.basename(current)]);
    expect(zlib.gunzipSync(fs.readFileSync(current)).length).toBeGreaterThan(1_000_000);
    // The next fresh directory starts from it.
    const next = await freshStart(imageDir);
    expect(next.marked).toBe(false);
    expect(next.applied).toEqual(migrationsList.map((m) => m.name));
  }, 480_000);

  it('the key follows what the migrations do', async () => {
    const current = await embeddedImageKey();
    const [first, ...rest] = migrationsList;
    if (!first) throw new Error('no migrations');
    const Base = first.class as unknown as new (
      driver: unknown,
      config: unknown,
    ) => { up(): Promise<void>; addSql(sql: string): void };
    class Changed extends Base {
      override async up() {
        await super.up();
        this.addSql('create index on users (email)');
      }
    }
    expect(await embeddedImageKey([first, ...rest])).toBe(current);
    expect(await embeddedImageKey([{ name: first.name, class: Changed as never }, ...rest])).not.toBe(
      current,
    );
    expect(await embeddedImageKey(rest)).not.toBe(current);
  });
});
