import type { IncomingMessage, ServerResponse } from 'node:http';
import express from 'express';
import { AppError, INVALID_REQUEST_BODY, toAppError } from './errors.js';

const JSON_TYPE = /^application\/json\s*(;|$)/i;

/** A JSON body reader (express's body-parser) that takes any content type it is handed. */
export const jsonReader = (limit: number | string) => express.json({ limit, type: () => true });

/**
 * For raw routes that authenticate before they judge the body: the parsed JSON body, or the
 * error it earns (400 `Invalid request body` for another content type or malformed JSON, 413
 * over the reader's limit), for the route to report when its turn comes.
 */
export function readJsonBody(
  reader: ReturnType<typeof jsonReader>,
  req: IncomingMessage & { body?: unknown },
  res: ServerResponse,
): Promise<{ body?: unknown; error?: AppError }> {
  if (!JSON_TYPE.test(req.headers['content-type'] ?? '')) {
    return Promise.resolve({ error: new AppError(400, INVALID_REQUEST_BODY) });
  }
  return new Promise((resolve) => {
    reader(req as express.Request, res as express.Response, (err?: unknown) =>
      resolve(err ? { error: toAppError(err) } : { body: req.body }),
    );
  });
}
