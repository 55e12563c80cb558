import { createHash } from 'node:crypto';
import { type Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ObjectStore } from './object-store.js';

/**
 * Moving objects between two stores (local files ↔ S3), as `ai-suite storage migrate` does.
 * Idempotent, so an interrupted move is resumed by running it again: an object already in the
 * target with the same bytes (sha-256 of both) is left alone, anything else is copied again.
 * Every copy is read back from the target and compared with what was read from the source. The
 * source is never changed.
 */

export interface MigrateItem {
  key: string;
  /** Stored with the object where the target keeps a type (S3). */
  contentType?: string;
}

export interface MigrateProgress {
  key: string;
  outcome: 'copied' | 'present' | 'missing' | 'failed';
  done: number;
  total: number;
}

export interface MigrateOptions {
  /** Count and size only: nothing is read whole, nothing is written. */
  dryRun?: boolean;
  /** Objects moved at the same time (4). */
  concurrency?: number;
  onProgress?: (p: MigrateProgress) => void;
}

export interface MigrateReport {
  dryRun: boolean;
  /** Objects the database refers to. */
  objects: number;
  /** Their bytes in the source (those found there). */
  bytes: number;
  /** Copied and verified (dry run: to be copied: absent from the target or of another size). */
  copied: number;
  copiedBytes: number;
  /** Already in the target with the same bytes (dry run: with the same size, to be verified). */
  present: number;
  /** In neither store: their files answer 404 `Storage key not found` before and after. */
  missing: string[];
  failed: { key: string; error: string }[];
}

const hashing = (hash: ReturnType<typeof createHash>) =>
  new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk);
      cb(null, chunk);
    },
  });

async function digest(body: Readable): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of body) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** sha-256 and size of an object, or null when it is not there. */
async function fingerprint(
  store: ObjectStore,
  key: string,
): Promise<{ sha256: string; size: number } | null> {
  const obj = await store.get(key);
  if (!obj) return null;
  let size = 0;
  const hash = createHash('sha256');
  for await (const chunk of obj.body) {
    size += (chunk as Buffer).length;
    hash.update(chunk as Buffer);
  }
  return { sha256: hash.digest('hex'), size };
}

async function moveOne(
  item: MigrateItem,
  from: ObjectStore,
  to: ObjectStore,
  dryRun: boolean,
  report: MigrateReport,
): Promise<MigrateProgress['outcome']> {
  const [src, dst] = await Promise.all([from.head(item.key), to.head(item.key)]);
  if (!src) {
    // Already moved and gone from the source (an earlier run, then a cleanup): nothing to do.
    if (dst) {
      report.present++;
      return 'present';
    }
    report.missing.push(item.key);
    return 'missing';
  }
  report.bytes += src.size;
  if (dryRun) {
    if (dst && dst.size === src.size) {
      report.present++;
      return 'present';
    }
    report.copied++;
    report.copiedBytes += src.size;
    return 'copied';
  }
  if (dst && dst.size === src.size) {
    const [a, b] = await Promise.all([fingerprint(from, item.key), fingerprint(to, item.key)]);
    if (a && b && a.sha256 === b.sha256 && a.size === b.size) {
      report.present++;
      return 'present';
    }
  }
  const obj = await from.get(item.key);
  if (!obj) {
    report.missing.push(item.key);
    return 'missing';
  }
  const hash = createHash('sha256');
  const tap = hashing(hash);
  const piped = pipeline(obj.body, tap).catch((err: unknown) => {
    tap.destroy(err as Error);
    throw err;
  });
  const [{ size }] = await Promise.all([
    to.put(item.key, tap, { contentType: item.contentType ?? obj.contentType }),
    piped,
  ]);
  const sourceSha = hash.digest('hex');
  const written = await to.get(item.key);
  const writtenSha = written ? await digest(written.body) : null;
  if (size !== obj.size || writtenSha !== sourceSha) {
    throw new Error(
      `verification failed: ${obj.size} bytes sha-256 ${sourceSha} read, ${size} bytes sha-256 ${writtenSha ?? 'none'} in the target`,
    );
  }
  report.copied++;
  report.copiedBytes += size;
  return 'copied';
}

/** Copies every object of `items` from `from` to `to` (see the module comment). Never throws for one object. */
export async function migrateObjects(
  items: MigrateItem[],
  from: ObjectStore,
  to: ObjectStore,
  opts: MigrateOptions = {},
): Promise<MigrateReport> {
  const dryRun = opts.dryRun ?? false;
  const report: MigrateReport = {
    dryRun,
    objects: items.length,
    bytes: 0,
    copied: 0,
    copiedBytes: 0,
    present: 0,
    missing: [],
    failed: [],
  };
  let next = 0;
  let done = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) {
      const item = items[i] as MigrateItem;
      let outcome: MigrateProgress['outcome'];
      try {
        outcome = await moveOne(item, from, to, dryRun, report);
      } catch (err) {
        report.failed.push({ key: item.key, error: err instanceof Error ? err.message : String(err) });
        outcome = 'failed';
      }
      opts.onProgress?.({ key: item.key, outcome, done: ++done, total: items.length });
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, opts.concurrency ?? 4) }, worker));
  report.missing.sort();
  report.failed.sort((a, b) => a.key.localeCompare(b.key));
  return report;
}
