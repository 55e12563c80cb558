import { pipeline } from 'node:stream';
import busboy from 'busboy';
import type { Request, Response, Router } from 'express';
import { z } from 'zod';
import { authenticate, SESSION } from '../../auth/authenticate.js';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { AppError, appError } from '../../errors/index.js';
import { sendError, toAppError } from '../../http/errors.js';
import { securityFor } from '../../http/openapi-security.js';
import type { RawRouteModule } from '../../http/raw-routes.js';
import { StorageService } from '../storage/service.js';
import { documentPool } from './document-pool.js';
import { MAX_FILE_BYTES } from './documents.js';
import { documentKind } from './extract.js';
import { TailKeeper, takeHead } from './first-bytes.js';
import { RAG_UPLOAD_ENDPOINT } from './ingest.js';
import { HEAD_BYTES, TAIL_BYTES } from './inspect.js';
import { type RagUploadDetail, type RagUploadResult, RagUploadResultSchema } from './schema.js';
import { RagService } from './service.js';

const tooLarge = (name: string) => `File ${name} exceeds maximum size of 100MB`;
/** Files per upload request. */
const MAX_FILES = 20;

class FileTooLargeError extends Error {}

/** A failure of the client's own making for one file (type, size): 400 when every file has one. */
const CLIENT_FAILURE = Symbol('client');
type Detail = RagUploadDetail & { [CLIENT_FAILURE]?: boolean };

const refused = (filename: string, error: string): Detail => ({
  filename,
  documentId: null,
  chunks: 0,
  status: 'failed',
  error,
  [CLIENT_FAILURE]: true,
});

/**
 * `POST /rag/upload` (spec 4.12): multipart `workspace_id` then `files[]`, read with busboy.
 * Each file is streamed into object storage as a storage file of type `document` (never whole
 * in memory; more than 100 MB stops it), then read back, extracted, chunked, embedded and
 * indexed; each file gets its own outcome. Files are handled one after another, in order.
 */
function receive(
  deps: ServerDeps,
  req: Request,
  principal: Principal,
): Promise<{ workspaceId: string; details: Detail[] }> {
  const rag = new RagService(deps);
  const storage = new StorageService(deps.em(), deps.objects);
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({
        headers: req.headers,
        defParamCharset: 'utf8',
        // busboy signals `limit` when a file reaches the limit: one byte more tells a file of
        // exactly 100 MB from a larger one.
        limits: { fileSize: MAX_FILE_BYTES + 1, files: MAX_FILES, fields: 20, fieldSize: 64 * 1024 },
      });
    } catch {
      reject(appError('INVALID_REQUEST_BODY', { details: { expected: 'multipart/form-data' } }));
      return;
    }
    let workspaceId: string | undefined;
    let ready: Promise<void> | undefined;
    let chain: Promise<void> = Promise.resolve();
    let failed = false;
    let fileParts = 0;
    const details: Detail[] = [];
    const fail = (err: unknown) => {
      if (failed) return;
      failed = true;
      req.unpipe(bb);
      req.resume();
      reject(err);
    };

    bb.on('field', (name, value) => {
      if (failed || name !== 'workspace_id' || workspaceId !== undefined) return;
      workspaceId = value.trim();
      if (!workspaceId) return fail(appError('WORKSPACE_ID_REQUIRED'));
      const ws = workspaceId;
      ready = rag.assertAccess(principal, ws).then(() => rag.provision(ws));
      ready.catch(fail);
    });

    bb.on('file', (field, stream, info) => {
      if (failed) {
        stream.resume();
        return;
      }
      if (field !== 'files[]' && field !== 'files') {
        stream.resume();
        return;
      }
      fileParts++;
      const name = info.filename || 'unnamed';
      if (!workspaceId || !ready) {
        stream.resume();
        fail(appError('WORKSPACE_ID_REQUIRED', { details: { hint: 'send workspace_id before the files' } }));
        return;
      }
      const ws = workspaceId;
      const gate = ready;
      // Past the limit busboy ends the part early (truncated); the stored remains are removed below.
      let over = false;
      stream.once('limit', () => {
        over = true;
      });
      chain = chain.then(async () => {
        await gate;
        if (failed) {
          stream.resume();
          return;
        }
        const kind = documentKind(name, info.mimeType);
        if (!kind.kind) {
          stream.resume();
          details.push({
            filename: name,
            documentId: null,
            chunks: 0,
            status: 'failed',
            error: `File type ${kind.type} not supported for ${name}`,
            [CLIENT_FAILURE]: true,
          });
          return;
        }
        // Bounds its first bytes already pass (a CSV's columns, a JSON's depth): refused before
        // anything is stored.
        const pool = documentPool(deps);
        const limits = deps.config.documents.limits;
        const { head, body, discard } = await takeHead(stream, HEAD_BYTES);
        const early = await pool.inspect({ workspaceId: ws, kind: kind.kind, limits, head });
        if (early) {
          discard();
          details.push(refused(name, early.message));
          return;
        }
        const keeper = kind.kind === 'docx' ? new TailKeeper(TAIL_BYTES) : undefined;
        let stored: Awaited<ReturnType<StorageService['createFile']>>;
        try {
          stored = await storage.createFile({
            workspaceId: ws,
            type: 'document',
            filename: name,
            mimeType: kind.mime,
            source: 'RAG upload',
            body: keeper ? pipeline(body, keeper, () => {}) : body,
          });
          if (over) {
            await storage.deleteFile(ws, stored.id).catch(() => undefined);
            throw new FileTooLargeError(tooLarge(name));
          }
        } catch (err) {
          stream.resume();
          if (over || err instanceof FileTooLargeError) {
            details.push({
              filename: name,
              documentId: null,
              chunks: 0,
              status: 'failed',
              error: tooLarge(name),
              [CLIENT_FAILURE]: true,
            });
            return;
          }
          if (err instanceof AppError && err.status < 500) {
            details.push({
              filename: name,
              documentId: null,
              chunks: 0,
              status: 'failed',
              error: err.message,
            });
            return;
          }
          throw err;
        }
        // A DOCX's central directory, at its end: its part count and declared sizes.
        if (keeper && !over) {
          const late = await pool.inspect({
            workspaceId: ws,
            kind: 'docx',
            limits,
            tail: keeper.tail(),
            size: stored.sizeBytes ?? 0,
          });
          if (late) {
            await storage.deleteFile(ws, stored.id).catch(() => undefined);
            details.push(refused(name, late.message));
            return;
          }
        }
        const doc = await rag.createDocument({
          workspaceId: ws,
          name,
          mimeType: kind.mime,
          sizeBytes: stored.sizeBytes,
          storageFileId: stored.id,
          storageKey:
            (
              await deps
                .em()
                .execute<{ storage_key: string }[]>('select storage_key from storage_files where id = ?', [
                  stored.id,
                ])
            )[0]?.storage_key ?? null,
          status: 'queued',
        });
        const indexed = await rag.indexDocument(ws, doc.id, {
          requestId: req.requestId ?? 'rag-upload',
          endpoint: RAG_UPLOAD_ENDPOINT,
        });
        details.push(
          indexed.status === 'ready'
            ? { filename: name, documentId: doc.id, chunks: indexed.chunks, status: 'completed' }
            : {
                filename: name,
                documentId: doc.id,
                chunks: 0,
                status: 'failed',
                error: indexed.error ?? 'Failed to index the document',
              },
        );
      });
      chain.catch(fail);
    });

    bb.on('filesLimit', () => fail(appError('UPLOAD_LIMIT_EXCEEDED', { MAX_FILES })));
    bb.on('error', () => fail(appError('INVALID_REQUEST_BODY')));
    req.once('close', () => {
      if (!req.complete && !failed) {
        bb.destroy(new Error('Request aborted'));
        fail(appError('REQUEST_ABORTED'));
      }
    });
    bb.on('close', () => {
      void chain.then(async () => {
        if (failed) return;
        if (!workspaceId) return fail(appError('WORKSPACE_ID_REQUIRED'));
        await ready;
        if (fileParts === 0) return fail(appError('FILE_REQUIRED'));
        resolve({ workspaceId, details });
      }, fail);
    });
    req.pipe(bb);
  });
}

async function upload(deps: ServerDeps, req: Request, res: Response) {
  const principal = await authenticate(req, deps, deps.em(), SESSION);
  if (!/^multipart\/form-data/i.test(req.headers['content-type'] ?? '')) {
    throw appError('INVALID_REQUEST_BODY', { details: { expected: 'multipart/form-data' } });
  }
  const { workspaceId, details } = await receive(deps, req, principal);
  const successful = details.filter((d) => d.status === 'completed').length;
  const out = details.map(({ [CLIENT_FAILURE]: _, ...d }) => d);
  // Every file refused for its type or size: the request itself is refused with the first reason.
  if (successful === 0 && details.length > 0 && details.every((d) => d[CLIENT_FAILURE])) {
    throw appError('UPLOAD_REFUSED', {
      reason: details[0]?.error ?? 'Invalid request body',
      details: { results: out },
    });
  }
  const body: RagUploadResult = {
    status: 'success',
    message:
      successful === details.length
        ? `${successful} file(s) uploaded and indexed`
        : `${successful} of ${details.length} file(s) uploaded and indexed`,
    results: { successful, failed: details.length - successful, details: out },
    workspace_id: workspaceId,
    timestamp: new Date().toISOString(),
  };
  res.status(200).json(body);
}

function handle(deps: ServerDeps) {
  return (req: Request, res: Response) => {
    upload(deps, req, res).catch((err: unknown) => {
      let appErr = toAppError(err);
      if (appErr.status >= 500) {
        deps.log.error({ err }, 'RAG upload failed');
        appErr = appError('UPLOAD_FAILED');
      }
      if (!req.complete) {
        res.setHeader('connection', 'close');
        req.unpipe();
        req.resume();
      }
      sendError(res, appErr);
    });
  };
}

export const ragRoutes: RawRouteModule = {
  name: 'rag',
  mount(router: Router, deps: ServerDeps) {
    router.post('/rag/upload', handle(deps));
  },
  openapi: {
    '/rag/upload': {
      post: {
        operationId: 'rag-upload',
        tags: ['RAG'],
        summary: 'Upload documents to the workspace index (multipart, streamed)',
        description:
          'Session only (401 `Authentication required`). `workspace_id` must precede the `files[]` parts. Supported: .txt, .md, .csv, .json, .pdf, .docx, each up to 100 MB. The index is provisioned on the first upload. Partial success: each file has its own outcome; an unsupported type fails with `File type <type> not supported for <name>`, an oversized file with `File <name> exceeds maximum size of 100MB`, a file whose first bytes (or, for a DOCX, central directory) already pass a document bound with that bound, e.g. `CSV record 1 has 100000 columns; the limit is 2000` (nothing is stored). When every file fails for one of these reasons the request answers 400 with the first. A bound found during indexing (pages, characters, chunks, inflated sizes, memory, time) fails that file with the bound named in its `error`. A workspace that already has `DOCUMENT_QUEUE_PER_WORKSPACE` (8) documents being processed fails the file with `The workspace already has 8 documents being processed; the limit is 8 at a time, try again when one is done` (the file is stored; re-index it later). 400 `workspace_id is required`, `At least one file is required`; 403 `Access denied to workspace`; 500 `Failed to upload files`.',
        security: securityFor(SESSION),
        requestBody: {
          content: {
            'multipart/form-data': {
              schema: z.object({
                workspace_id: z.string(),
                'files[]': z.array(z.string().meta({ format: 'binary' })),
              }),
            },
          },
        },
        responses: {
          200: {
            description: 'Per-file outcome',
            content: { 'application/json': { schema: RagUploadResultSchema } },
          },
          400: { description: 'Validation error' },
          401: { description: '`Authentication required`' },
          403: { description: '`Access denied to workspace`' },
          500: { description: '`Failed to upload files`' },
        },
      },
    },
  },
};
