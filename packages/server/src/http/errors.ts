import type { ServerResponse } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import { z } from 'zod';
import { isDatabaseUnavailable } from '../db/unavailable.js';

/** The one error body of the API: `{ error, code?, details? }` (spec section 7). */
export const ErrorBodySchema = z
  .object({
    error: z.string(),
    code: z.string().optional(),
    details: z.record(z.string(), z.unknown()).optional(),
  })
  .meta({ id: 'ErrorBody', description: 'Standard error body of every failed request.' });

export type ErrorBody = z.infer<typeof ErrorBodySchema>;

/**
 * The error every layer throws. Services throw it; the tRPC wrapper, raw routes, SSE writers
 * and the final express handler all render it the same way.
 */
export class AppError extends Error {
  override name = 'AppError';
  constructor(
    readonly status: number,
    message: string,
    readonly code?: string,
    readonly details?: Record<string, unknown>,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
  }

  toBody(): ErrorBody {
    const body: ErrorBody = { error: this.message };
    if (this.code !== undefined) body.code = this.code;
    if (this.details !== undefined) body.details = this.details;
    return body;
  }
}

export const badRequest = (message: string, code?: string, details?: Record<string, unknown>) =>
  new AppError(400, message, code, details);
export const unauthorized = (message = 'Invalid API key') => new AppError(401, message);
export const forbidden = (message: string, code?: string) => new AppError(403, message, code);
export const notFound = (message: string, code?: string) => new AppError(404, message, code);
export const conflict = (message: string, code?: string, details?: Record<string, unknown>) =>
  new AppError(409, message, code, details);

export const INVALID_REQUEST_BODY = 'Invalid request body';

/** Seconds a caller is told to wait when the database is unavailable (a restart takes a few). */
export const UNAVAILABLE_RETRY_AFTER_SECONDS = 5;

/** 503 of spec 7, for a database that is restarting or unreachable: try again shortly. */
export const serviceUnavailable = () =>
  new AppError(503, 'Service temporarily unavailable', 'SERVICE_UNAVAILABLE', undefined, {
    'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS),
  });

/** Messages zod writes by itself (as opposed to the spec's own, set on each schema). */
const ZOD_DEFAULT_MESSAGE =
  /^(Invalid (input|option|string|key|element|union|type|format|number|date)\b|Too (big|small)|Unrecognized|Expected|Required$)/;

interface IssueLike {
  path: readonly PropertyKey[];
  message: string;
  /** zod's issue code; `unrecognized_keys` carries the offending `keys`. */
  code?: string;
  keys?: readonly string[];
}

/** One issue per unknown key, its path ending with the key, so the caller sees where it is. */
function expandUnknownKeys(issues: readonly IssueLike[]): IssueLike[] {
  return issues.flatMap((i) =>
    i.code === 'unrecognized_keys' && i.keys?.length
      ? i.keys.map((k) => ({ path: [...i.path, k], message: 'Unknown key', code: i.code }))
      : [i],
  );
}

/**
 * A validation failure becomes the spec's message when the schema carries one, or
 * `<path>: <zod message>` otherwise, with every issue listed under `details.issues`. Code
 * `VALIDATION_ERROR` unless the endpoint's spec names another (artifacts: `INVALID_INPUT`).
 */
export function validationError(rawIssues: readonly IssueLike[], code = 'VALIDATION_ERROR'): AppError {
  const issues = expandUnknownKeys(rawIssues);
  const first = issues[0];
  const render = (i: IssueLike) => {
    const p = i.path.map(String).join('.');
    if (i.code === 'unrecognized_keys') return `Unknown key: ${p}`;
    return ZOD_DEFAULT_MESSAGE.test(i.message) && p ? `${p}: ${i.message}` : i.message;
  };
  return new AppError(400, first ? render(first) : INVALID_REQUEST_BODY, code, {
    issues: issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message })),
  });
}

/**
 * Answers with the error's status, headers and JSON body; after the headers went out, cuts the
 * connection instead. Plain Node `ServerResponse` (express's is one): the `/chat` fast path
 * answers outside express with the same bytes.
 */
export function sendError(res: ServerResponse, err: AppError): void {
  if (res.headersSent) {
    res.destroy(err);
    return;
  }
  const body = JSON.stringify(err.toBody());
  if (err.headers) for (const [k, v] of Object.entries(err.headers)) res.setHeader(k, v);
  res.statusCode = err.status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(body));
  res.end(body);
}

/** Turns anything thrown into an AppError; unknown errors become an opaque 500. */
export function toAppError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  if (err instanceof z.ZodError) return validationError(err.issues);
  const e = err as { type?: string; status?: number; statusCode?: number; expose?: boolean };
  // body-parser errors: malformed JSON, wrong charset, too large
  if (e?.type === 'entity.parse.failed' || e?.type === 'charset.unsupported') {
    return new AppError(400, INVALID_REQUEST_BODY);
  }
  if (e?.type === 'entity.too.large') return new AppError(413, 'Request body too large');
  if (isDatabaseUnavailable(err)) return serviceUnavailable();
  return new AppError(500, 'Internal server error', 'INTERNAL_ERROR');
}

export function errorHandler(log: { error: (obj: unknown, msg?: string) => void }) {
  return (err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const appErr = toAppError(err);
    if (appErr.status >= 500) log.error({ err }, 'request failed');
    sendError(res, appErr);
  };
}
