import fsp from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import busboy from 'busboy';
import type { Request, Response, Router } from 'express';
import { z } from 'zod';
import { API_KEY_OR_SESSION, authenticate } from '../../auth/authenticate.js';
import type { ServerDeps } from '../../context.js';
import { appError } from '../../errors/index.js';
import { sendError, toAppError } from '../../http/errors.js';
import { securityFor } from '../../http/openapi-security.js';
import type { RawRouteModule } from '../../http/raw-routes.js';
import { LocalObjectStore, SIGNED_OBJECT_ROUTE } from '../../storage/local-store.js';
import type { StorageFileType } from './entities.js';
import {
  fileTooLarge,
  type ImportLimits,
  ImportSession,
  importLimits,
  importZip,
  receiveToTempFile,
} from './import.js';
import { normalizeFolderPath } from './paths.js';
import { FILE_TYPES, ImportResultSchema } from './schema.js';
import { assertWorkspace, StorageService } from './service.js';

const contentDisposition = (name: string) =>
  `inline; filename="${name.replace(/[^\x20-\x7e]|["\\]/g, '_')}"; filename*=UTF-8''${encodeURIComponent(name)}`;

/** User content is served as an inert document: no scripts, no same-origin access. */
function setContentHeaders(res: Response, mimeType: string, size: number, filename?: string) {
  res.setHeader('content-type', mimeType);
  res.setHeader('content-length', String(size));
  res.setHeader('content-disposition', filename ? contentDisposition(filename) : 'inline');
  res.setHeader('content-security-policy', "sandbox; default-src 'none'");
  res.setHeader('x-content-type-options', 'nosniff');
  res.setHeader('cache-control', 'private, no-store');
}

function fail(deps: ServerDeps, req: Request, res: Response, err: unknown) {
  const appErr = toAppError(err);
  if (appErr.status >= 500) deps.log.error({ err, path: req.path }, 'storage request failed');
  if (!req.complete) {
    // Stop reading a body we will not use; the client gets the answer and the connection closes.
    res.setHeader('connection', 'close');
    req.unpipe();
    req.resume();
  }
  sendError(res, appErr);
}

async function authorize(req: Request, deps: ServerDeps) {
  const em = deps.em();
  const principal = await authenticate(req, deps, em, API_KEY_OR_SESSION);
  assertWorkspace(principal.workspaceId, req.params.workspaceId);
  return { principal, storage: new StorageService(em, deps.objects) };
}

async function content(deps: ServerDeps, req: Request, res: Response) {
  const { principal, storage } = await authorize(req, deps);
  const fileId = typeof req.query.fileId === 'string' ? req.query.fileId.trim() : '';
  const fileType = typeof req.query.fileType === 'string' ? req.query.fileType.trim() : '';
  if (!fileId || !fileType) throw appError('MISSING_FILEID_OR_FILETYPE');
  if (!(FILE_TYPES as readonly string[]).includes(fileType)) {
    throw appError('INVALID_FILE_TYPE');
  }
  const opened = await storage.openContent(principal.workspaceId, fileId, fileType as StorageFileType);
  setContentHeaders(res, opened.mimeType, opened.size, opened.file.filename);
  res.status(200);
  await pipeline(opened.body, res);
}

/**
 * Multipart import, streamed: each part goes straight to the object store (a zip goes to a
 * temporary file first, since its directory is at the end). Text fields (`kind`, `pathPrefix`)
 * must come before the file parts; they apply to the files that follow them.
 */
function importMultipart(
  deps: ServerDeps,
  req: Request,
  storage: StorageService,
  workspaceId: string,
  limits: ImportLimits,
): Promise<ReturnType<ImportSession['result']>> {
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({
        headers: req.headers,
        preservePath: true,
        // Browsers and undici send a part's filename as raw UTF-8 (busboy assumes latin1).
        defParamCharset: 'utf8',
        limits: { fileSize: limits.maxFileBytes, fields: 50, fieldSize: 64 * 1024, files: limits.maxEntries },
      });
    } catch {
      reject(appError('INVALID_REQUEST_BODY'));
      return;
    }
    let kind: 'folder' | 'zip' | 'files' = 'folder';
    let prefix = '/';
    let session: ImportSession | undefined;
    let fileParts = 0;
    let zipParts = 0;
    let chain: Promise<void> = Promise.resolve();
    let failed = false;
    const fail = (err: unknown) => {
      if (failed) return;
      failed = true;
      req.unpipe(bb);
      req.resume();
      reject(err);
    };
    const sessionFor = (source: string) => {
      session ??= new ImportSession(storage, workspaceId, prefix, { source });
      return session;
    };

    bb.on('field', (name, value) => {
      if (failed) return;
      if (name === 'kind') {
        if (value !== 'folder' && value !== 'zip' && value !== 'files') {
          fail(appError('INVALID_IMPORT_KIND'));
        } else kind = value;
      } else if (name === 'pathPrefix') {
        try {
          prefix = normalizeFolderPath(value);
        } catch (err) {
          fail(err);
        }
      }
    });

    bb.on('file', (field, stream, info) => {
      if (failed) {
        stream.resume();
        return;
      }
      const name = info.filename ?? field;
      if (kind === 'zip') {
        if (field !== 'file' || zipParts > 0) {
          sessionFor('Zip import').skip(stream);
          return;
        }
        zipParts++;
        const s = sessionFor(`Zip import: ${name}`);
        chain = chain
          .then(async () => {
            const tmp = await receiveToTempFile(deps.config.dataDir, stream, name, limits);
            try {
              await importZip(s, tmp, limits);
            } finally {
              await fsp.rm(tmp, { force: true });
            }
          })
          .catch(fail);
        return;
      }
      fileParts++;
      const s = sessionFor('Upload');
      stream.once('limit', () => stream.destroy(fileTooLarge(name, limits.maxFileBytes)));
      chain = chain
        .then(() => (failed ? void stream.resume() : s.addFile(name, stream, info.mimeType)))
        .catch(fail);
    });

    bb.on('filesLimit', () =>
      fail(
        appError('IMPORT_TOO_MANY_FILES', {
          maxEntries: limits.maxEntries,
          details: {
            maxEntries: limits.maxEntries,
          },
        }),
      ),
    );
    bb.on('error', () => fail(appError('INVALID_REQUEST_BODY')));
    // A client that goes away mid-upload: end the part being stored with an error so the
    // object store discards it, instead of waiting forever for bytes that will not come.
    req.once('close', () => {
      if (!req.complete && !failed) {
        bb.destroy(new Error('Request aborted'));
        fail(appError('REQUEST_ABORTED'));
      }
    });
    bb.on('close', () => {
      void chain.then(() => {
        if (failed) return;
        if (kind === 'zip' && zipParts === 0) return fail(appError('ZIP_REQUIRED'));
        if (kind !== 'zip' && fileParts === 0) return fail(appError('NO_FILES_TO_IMPORT'));
        resolve((session as ImportSession).result());
      });
    });
    req.pipe(bb);
  });
}

async function importRoute(deps: ServerDeps, req: Request, res: Response) {
  const { principal, storage } = await authorize(req, deps);
  if (!/^multipart\/form-data/i.test(req.headers['content-type'] ?? '')) {
    throw appError('INVALID_REQUEST_BODY', { details: { expected: 'multipart/form-data' } });
  }
  const result = await importMultipart(deps, req, storage, principal.workspaceId, importLimits(deps.config));
  res.status(201).json(result);
}

/** HMAC-signed links of the embedded store; the signature is the credential. */
async function signedObject(deps: ServerDeps, req: Request, res: Response) {
  const store = deps.objects;
  const segments = (req.params as unknown as { key?: string[] }).key ?? [];
  const key = segments.join('/');
  const q = req.query as Record<string, string | undefined>;
  const params = { key, exp: Number(q.exp), contentType: q.ct || undefined, filename: q.fn || undefined };
  if (!(store instanceof LocalObjectStore) || typeof q.sig !== 'string' || !store.verify(params, q.sig)) {
    throw appError('INVALID_SIGNATURE');
  }
  const obj = await store.get(key);
  if (!obj) throw appError('STORAGE_KEY_NOT_FOUND');
  setContentHeaders(res, params.contentType ?? 'application/octet-stream', obj.size, params.filename);
  res.status(200);
  await pipeline(obj.body, res);
}

const handle =
  (deps: ServerDeps, fn: (deps: ServerDeps, req: Request, res: Response) => Promise<void>) =>
  (req: Request, res: Response) => {
    fn(deps, req, res).catch((err: unknown) => fail(deps, req, res, err));
  };

const errors = {
  400: { description: 'Validation error' },
  401: { description: "`Invalid API key`, or `Unauthorized` when {workspaceId} is not the key's workspace" },
};
const workspaceParam = z.string().describe("The API key's workspace id");

export const storageRoutes: RawRouteModule = {
  name: 'storage',
  mount(router: Router, deps: ServerDeps) {
    router.get('/workspaces/:workspaceId/storage/content', handle(deps, content));
    router.post('/workspaces/:workspaceId/storage/import', handle(deps, importRoute));
    router.get(`${SIGNED_OBJECT_ROUTE}/*key`, handle(deps, signedObject));
  },
  openapi: {
    [`${SIGNED_OBJECT_ROUTE}/{key}`]: {
      get: {
        operationId: 'storage-signed-object',
        security: [],
        tags: ['Storage'],
        summary: 'Download through a signed link of the embedded object store (the `presignedUrl` of a file)',
        description:
          'No credentials: the HMAC signature over key, expiry, content type and file name is the credential. A tampered or expired link gives 403. Only served when objects are stored on the local filesystem.',
        requestParams: {
          path: z.object({ key: z.string() }),
          query: z.object({
            exp: z.string(),
            sig: z.string(),
            ct: z.string().optional(),
            fn: z.string().optional(),
          }),
        },
        responses: {
          200: {
            description: 'The object',
            content: { 'application/octet-stream': { schema: z.string().meta({ format: 'binary' }) } },
          },
          403: { description: '`Invalid or expired link`' },
          404: { description: '`Storage key not found`' },
        },
      },
    },
    '/workspaces/{workspaceId}/storage/content': {
      get: {
        operationId: 'storage-content',
        tags: ['Storage'],
        summary: 'Read a file: the raw bytes with the stored MIME type, Content-Disposition inline',
        security: securityFor(API_KEY_OR_SESSION),
        requestParams: {
          path: z.object({ workspaceId: workspaceParam }),
          query: z.object({
            fileId: z.string().describe('Required'),
            fileType: z.enum(FILE_TYPES).describe('Required'),
          }),
        },
        responses: {
          200: {
            description: 'The file content',
            content: { 'application/octet-stream': { schema: z.string().meta({ format: 'binary' }) } },
          },
          ...errors,
          404: { description: '`File not found`, `Storage key not found` or `Empty file`' },
        },
      },
    },
    '/workspaces/{workspaceId}/storage/import': {
      post: {
        operationId: 'storage-import',
        tags: ['Storage'],
        summary: 'Import files, a folder or a zip (multipart, streamed)',
        description:
          'Fields `kind` (`folder` default, `zip`, `files`) and `pathPrefix` must precede the file parts. `file[]` parts carry relative paths as their filenames; `file` is the zip. An existing file at the same path is replaced.',
        security: securityFor(API_KEY_OR_SESSION),
        requestParams: { path: z.object({ workspaceId: workspaceParam }) },
        requestBody: {
          content: {
            'multipart/form-data': {
              schema: z.object({
                kind: z.enum(['folder', 'zip', 'files']).optional(),
                pathPrefix: z.string().optional(),
                file: z.string().meta({ format: 'binary' }).optional(),
                'file[]': z.array(z.string().meta({ format: 'binary' })).optional(),
              }),
            },
          },
        },
        responses: {
          201: {
            description: 'Import result',
            content: { 'application/json': { schema: ImportResultSchema } },
          },
          ...errors,
          413: { description: '`File <name> exceeds the 500 MB upload limit`, or archive bounds exceeded' },
        },
      },
    },
  },
};
