import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import yauzl from 'yauzl';
import type { Config } from '../../config.js';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../../data-dir.js';
import { AppError, appError } from '../../errors/index.js';
import { byteCounter } from '../../storage/local-store.js';
import { resolveRelative } from './paths.js';
import type { ImportResultDto } from './schema.js';
import type { StorageService } from './service.js';

export interface ImportLimits {
  /** Per uploaded file, per zip entry, per repository file (spec: 500 MB). */
  maxFileBytes: number;
  /** Entries of one archive (files, folders, everything). */
  maxEntries: number;
  /** Uncompressed bytes of one archive. */
  maxTotalBytes: number;
}

const MB = 1024 * 1024;
const num = (v: string | undefined, fallback: number) => {
  const n = v === undefined || v.trim() === '' ? Number.NaN : Number(v);
  return Number.isFinite(n) && n > 0 ? Math.floor(n) : fallback;
};

export function importLimits(config: Config): ImportLimits {
  const env = config.env;
  return {
    maxFileBytes: num(env.STORAGE_IMPORT_MAX_FILE_BYTES, 500 * MB),
    maxEntries: num(env.STORAGE_IMPORT_MAX_ENTRIES, 10_000),
    maxTotalBytes: num(env.STORAGE_IMPORT_MAX_TOTAL_BYTES, 2048 * MB),
  };
}

const mbLabel = (bytes: number) => `${Number((bytes / MB).toFixed(2))} MB`;

export const fileTooLarge = (name: string, limit: number) =>
  appError('IMPORT_FILE_TOO_LARGE', { name, limit: mbLabel(limit) });

export const archiveTooLarge = (limits: ImportLimits) =>
  appError('IMPORT_ARCHIVE_TOO_LARGE', {
    maxEntries: limits.maxEntries,
    maxTotalBytes: mbLabel(limits.maxTotalBytes),
    details: { maxEntries: limits.maxEntries, maxTotalBytes: limits.maxTotalBytes },
  });

/** OS clutter that archives carry and nobody wants in the tree. */
export const isJunk = (rel: string) => rel.split('/').some((s) => s === '__MACOSX' || s === '.DS_Store');

export interface ImportOptions {
  source: string;
  sourceId?: string;
  isGitHostMirror?: boolean;
  externalRef?: (relativePath: string) => Record<string, unknown>;
}

/**
 * One import: resolves each entry's relative path under the prefix (refusing anything that
 * escapes it), streams the body to storage, and tallies the spec's result. An entry already
 * at the same path is replaced (re-importing a folder or repository updates it).
 */
export class ImportSession {
  imported = 0;
  skipped = 0;
  readonly errors: { path: string; error: string }[] = [];
  readonly fileIds: string[] = [];
  readonly id = randomUUID();

  constructor(
    private readonly storage: StorageService,
    private readonly workspaceId: string,
    readonly prefix: string,
    private readonly opts: ImportOptions,
  ) {}

  error(relPath: string, message: string, body?: Readable): void {
    body?.resume();
    this.errors.push({ path: relPath, error: message });
  }

  skip(body?: Readable): void {
    body?.resume();
    this.skipped++;
  }

  async addFolder(relPath: string): Promise<void> {
    // `./` (tar- and zip-style "this folder") names the import folder itself: nothing to create.
    if (/^(\.\/)*\.?\/*$/.test(relPath)) return;
    const r = resolveRelative(this.prefix, relPath.replace(/\/+$/, ''));
    if ('error' in r) return this.error(relPath, r.error);
    const full = r.folder === '/' ? `/${r.name}` : `${r.folder}/${r.name}`;
    await this.storage.ensureFolders(this.workspaceId, full);
  }

  async addFile(relPath: string, body: Readable, mimeType?: string, contentLength?: number): Promise<void> {
    // The store's pipeline reports a body error once; a source that errors again after the
    // pipeline has settled (yauzl does, per chunk) must not become an unhandled 'error'.
    body.on('error', () => undefined);
    const r = resolveRelative(this.prefix, relPath);
    if ('error' in r) return this.error(relPath, r.error, body);
    try {
      const file = await this.storage.createFile({
        workspaceId: this.workspaceId,
        type: 'file',
        filename: r.name,
        path: r.folder,
        mimeType,
        body,
        contentLength,
        source: this.opts.source,
        sourceId: this.opts.sourceId ?? this.id,
        isGitHostMirror: this.opts.isGitHostMirror ?? false,
        externalRef: this.opts.externalRef?.(relPath) ?? null,
        onConflict: 'replace',
      });
      this.imported++;
      this.fileIds.push(file.id);
    } catch (err) {
      // Per-entry problems (name taken by a folder, invalid name) are reported; the rest fail the import.
      if (err instanceof AppError && err.status < 500 && err.status !== 413) {
        return this.error(relPath, err.message, body);
      }
      throw err;
    }
  }

  result(): ImportResultDto {
    return { imported: this.imported, skipped: this.skipped, errors: this.errors, fileIds: this.fileIds };
  }
}

/** Writes an upload to a temporary file (yauzl needs random access), enforcing the size limit. */
export async function receiveToTempFile(
  dataDir: string,
  body: Readable,
  name: string,
  limits: ImportLimits,
): Promise<string> {
  const dir = path.join(dataDir, 'tmp');
  await fsp.mkdir(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  const file = path.join(dir, `import-${randomUUID()}.zip`);
  const counter = byteCounter();
  counter.on('data', () => {
    if (counter.bytes > limits.maxFileBytes) counter.destroy(fileTooLarge(name, limits.maxFileBytes));
  });
  body.once('limit', () => body.destroy(fileTooLarge(name, limits.maxFileBytes)));
  try {
    await pipeline(body, counter, fs.createWriteStream(file, { mode: PRIVATE_FILE_MODE }));
  } catch (err) {
    await fsp.rm(file, { force: true });
    throw err;
  }
  return file;
}

/**
 * Deflate cannot inflate past ~1032 times its input: an archive declaring more than that
 * from its size reuses compressed data across entries (overlapping entries, a zip bomb).
 */
export const MAX_DEFLATE_RATIO = 1032;

export const overlappingArchive = (declared: number, size: number) =>
  appError('IMPORT_ARCHIVE_OVERLAPPING', {
    details: { declaredBytes: declared, archiveBytes: size, maxRatio: MAX_DEFLATE_RATIO },
  });

const S_IFMT = 0o170000;
const S_IFLNK = 0o120000;

type ZipEntry = yauzl.Entry & { fileNameRaw: Buffer; extraFields: { id: number; data: Buffer }[] };

const yauzlLow = yauzl as unknown as {
  getFileNameLowLevel(
    flags: number,
    raw: Buffer,
    extra: { id: number; data: Buffer }[],
    strict: boolean,
  ): string;
};

/**
 * Imports a zip entry by entry. The central directory is read first: more entries than
 * `maxEntries` or a declared uncompressed total above `maxTotalBytes` refuses the archive
 * before anything is written, and yauzl checks each entry's real size against its declared
 * one while streaming, so a zip bomb ends as a 413, not a full disk. Entries that would land
 * outside the prefix (`../`, absolute paths) and symbolic links are refused one by one.
 */
export async function importZip(
  session: ImportSession,
  zipPath: string,
  limits: ImportLimits,
): Promise<void> {
  let zip: yauzl.ZipFile;
  try {
    zip = await new Promise<yauzl.ZipFile>((resolve, reject) =>
      yauzl.open(
        zipPath,
        { lazyEntries: true, autoClose: false, decodeStrings: false, validateEntrySizes: true },
        (err, z) => (err || !z ? reject(err) : resolve(z)),
      ),
    );
  } catch (err) {
    throw appError('INVALID_ZIP', { message: (err as Error).message });
  }
  try {
    if (zip.entryCount > limits.maxEntries) throw archiveTooLarge(limits);
    const entries: ZipEntry[] = [];
    let total = 0;
    await new Promise<void>((resolve, reject) => {
      zip.on('entry', (e: ZipEntry) => {
        total += e.uncompressedSize;
        if (total > limits.maxTotalBytes) {
          reject(archiveTooLarge(limits));
          return;
        }
        entries.push(e);
        zip.readEntry();
      });
      zip.on('end', () => resolve());
      zip.on('error', (err: Error) => reject(appError('INVALID_ZIP', { message: err.message })));
      zip.readEntry();
    });
    const size = (await fsp.stat(zipPath)).size;
    if (total > MAX_DEFLATE_RATIO * size) throw overlappingArchive(total, size);
    for (const e of entries) {
      const name = yauzlLow.getFileNameLowLevel(e.generalPurposeBitFlag, e.fileNameRaw, e.extraFields, false);
      const mode = (e.externalFileAttributes >>> 16) & S_IFMT;
      if (isJunk(name)) {
        session.skip();
      } else if (mode === S_IFLNK) {
        session.error(name, 'Symbolic links are not imported');
      } else if (name.endsWith('/')) {
        await session.addFolder(name);
      } else if ((e.generalPurposeBitFlag & 0x1) !== 0) {
        session.error(name, 'Encrypted entries are not supported');
      } else if (e.uncompressedSize > limits.maxFileBytes) {
        session.error(name, `File exceeds the ${mbLabel(limits.maxFileBytes)} upload limit`);
      } else {
        const target = resolveRelative(session.prefix, name);
        if ('error' in target) {
          session.error(name, target.error);
          continue;
        }
        try {
          const stream = await new Promise<Readable>((resolve, reject) =>
            zip.openReadStream(e, (err, s) => (err || !s ? reject(err) : resolve(s))),
          );
          await session.addFile(name, stream, undefined, e.uncompressedSize);
        } catch (err) {
          if (err instanceof AppError) throw err;
          // Corrupt data, or an entry larger than it declared (a lying zip bomb).
          throw appError('INVALID_ZIP', { message: (err as Error).message });
        }
      }
    }
  } finally {
    zip.close();
  }
}
