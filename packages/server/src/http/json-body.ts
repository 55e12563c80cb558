import type { IncomingMessage, ServerResponse } from 'node:http';
import express from 'express';
import { type AppError, appError } from '../errors/index.js';
import { toAppError } from './errors.js';

/** A JSON content type (what express.json parses, parameters allowed). */
export const JSON_TYPE = /^application\/json\s*(;|$)/i;

/**
 * Deepest nesting of objects and arrays a request body may have. Deeper bodies are refused
 * before any work: validating, storing or serialising them recurses once per level (a
 * 10,000-level body overflowed the stack). 64 is System.Text.Json's default and far above
 * anything the API's bodies need (an agent's tool input schema nests a few levels).
 */
export const MAX_JSON_DEPTH = 64;

/** Throws 400 `Invalid request body` when a parsed body nests deeper than MAX_JSON_DEPTH. */
export function assertJsonDepth(value: unknown): void {
  // Iterative: the walk itself must not recurse on what it guards against.
  const stack: [unknown, number][] = [[value, 1]];
  for (let item = stack.pop(); item; item = stack.pop()) {
    const [v, depth] = item;
    if (v === null || typeof v !== 'object') continue;
    if (depth > MAX_JSON_DEPTH) {
      throw appError('INVALID_REQUEST_BODY', { details: { maxDepth: MAX_JSON_DEPTH } });
    }
    for (const child of Object.values(v)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
}

/** A JSON body reader (express's body-parser) that takes any content type it is handed. */
export const jsonReader = (limit: number | string) => express.json({ limit, type: () => true });

/**
 * express middleware for raw routes that read JSON before authenticating (as express.json
 * does, `application/json` only): the parsed body, refused when it nests too deep.
 */
export const jsonBodyParser = (limit: number | string): express.RequestHandler[] => [
  express.json({ limit }),
  (req, _res, next) => {
    try {
      assertJsonDepth(req.body);
      next();
    } catch (err) {
      next(err);
    }
  },
];

/**
 * For raw routes that authenticate before they judge the body: the parsed JSON body, or the
 * error it earns (400 `Invalid request body` for another content type, malformed JSON or a
 * body nested too deep, 413 over the reader's limit), for the route to report when its turn
 * comes.
 */
export function readJsonBody(
  reader: ReturnType<typeof jsonReader>,
  req: IncomingMessage & { body?: unknown },
  res: ServerResponse,
): Promise<{ body?: unknown; error?: AppError }> {
  if (!JSON_TYPE.test(req.headers['content-type'] ?? '')) {
    return Promise.resolve({ error: appError('INVALID_REQUEST_BODY') });
  }
  return new Promise((resolve) => {
    reader(req as express.Request, res as express.Response, (err?: unknown) => {
      if (err) return resolve({ error: toAppError(err) });
      try {
        assertJsonDepth(req.body);
        resolve({ body: req.body });
      } catch (tooDeep) {
        resolve({ error: toAppError(tooDeep) });
      }
    });
  });
}
