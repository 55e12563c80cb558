import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres } from '../db/embedded.js';
import { EMBEDDED_EXTENSIONS } from '../db/extensions.js';
import { openDatabase } from '../db/orm.js';

import './provided.js';

/**
 * Builds one migrated embedded database per test run and hands its tarball to every test
 * file, so no file pays initdb and migrations. On the PostgreSQL server (DATABASE_URL) each
 * file creates its own database instead, and nothing is built here.
 */
export default async function setup(project: TestProject) {
  if (process.env.DATABASE_URL) {
    project.provide('pgTemplate', '');
    return;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-template-'));
  const file = path.join(dir, 'template.tar.gz');
  const embedded = await startEmbeddedPostgres({ extensions: EMBEDDED_EXTENSIONS });
  try {
    const db = await openDatabase({ embedded, migrate: true });
    await db.close();
    const blob = await embedded.dumpDataDir('gzip');
    fs.writeFileSync(file, Buffer.from(await blob.arrayBuffer()));
  } finally {
    await embedded.close();
  }
  project.provide('pgTemplate', file);
  return () => fs.rmSync(dir, { recursive: true, force: true });
}
