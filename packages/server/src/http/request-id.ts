import { randomUUID } from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';

const VALID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Echoes a sane caller-supplied `X-Request-Id`, or mints one. */
export function requestId(req: Request, res: Response, next: NextFunction) {
  const given = req.header('x-request-id');
  const id = given && VALID.test(given) ? given : `req_${randomUUID().replaceAll('-', '')}`;
  req.requestId = id;
  res.setHeader('X-Request-Id', id);
  next();
}
