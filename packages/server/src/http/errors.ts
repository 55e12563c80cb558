import type { ServerResponse } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import { z } from 'zod';
import { isDatabaseUnavailable } from '../db/unavailable.js';
import { AppError, appError, validationError } from '../errors/index.js';
import { countRefusal } from '../telemetry/metrics.js';

/** The one error body of the API, as the OpenAPI document describes it (spec section 7). */
export const ErrorBodySchema = z
  .object({
    error: z.string(),
    code: z.string().optional(),
    details: z.record(z.string(), z.unknown()).optional(),
  })
  .meta({ id: 'ErrorBody', description: 'Standard error body of every failed request.' });

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
  countRefused(err);
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
    return appError('INVALID_REQUEST_BODY');
  }
  if (e?.type === 'entity.too.large') return appError('REQUEST_BODY_TOO_LARGE');
  if (isDatabaseUnavailable(err)) return appError('SERVICE_UNAVAILABLE');
  return appError('INTERNAL_ERROR');
}

export function errorHandler(log: { error: (obj: unknown, msg?: string) => void }) {
  return (err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const appErr = toAppError(err);
    if (appErr.status >= 500) log.error({ err }, 'request failed');
    sendError(res, appErr);
  };
}

/** Metering refusals as they are answered (`aisuite_metering_refusals_total{reason}`). */
function countRefused(err: AppError): void {
  if (err.status === 402 && err.code === 'INSUFFICIENT_CREDITS') countRefusal('credits');
  else if (err.status === 403 && err.message === 'Token limit exceeded') countRefusal('token_quota');
}
