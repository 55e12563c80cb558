import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { NextFunction, Request, Response } from 'express';

const VALID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Echoes a sane caller-supplied `X-Request-Id`, or mints one; sets the response header. */
export function assignRequestId(req: IncomingMessage, res: ServerResponse): string {
  const given = req.headers['x-request-id'];
  const id =
    typeof given === 'string' && VALID.test(given) ? given : `req_${randomUUID().replaceAll('-', '')}`;
  (req as Request).requestId = id;
  res.setHeader('X-Request-Id', id);
  return id;
}

export function requestId(req: Request, res: Response, next: NextFunction) {
  // Already assigned when the fast path handed the request over (http/fast-path.ts).
  if (req.requestId === undefined) assignRequestId(req, res);
  next();
}
