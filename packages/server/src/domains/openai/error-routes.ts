import type { ServerResponse } from 'node:http';
import { toAppError } from '../../http/errors.js';
import { OpenAiError, openAiErrorBody, withOpenAiRateHeaders } from './errors.js';

/** Any error thrown below this surface, in OpenAI's terms. */
export function toOpenAiError(err: unknown): OpenAiError {
  if (err instanceof OpenAiError) return err;
  const e = toAppError(err);
  const headers = e.headers ? withOpenAiRateHeaders(e.headers) : undefined;
  const make = (
    status: number,
    type: string,
    param: string | null,
    code: string | null,
    message = e.message,
  ) => new OpenAiError(status, message, type, param, code, headers);
  switch (e.status) {
    case 400:
      if (e.key === 'INVALID_REQUEST_BODY') {
        return make(
          400,
          'invalid_request_error',
          null,
          'invalid_json',
          'We could not parse the JSON body of your request. The body must be one JSON object (application/json).',
        );
      }
      return make(400, 'invalid_request_error', null, e.code?.toLowerCase() ?? null);
    case 401:
      return make(401, 'invalid_request_error', null, 'invalid_api_key');
    // Spent credits (402) and a spent monthly token quota (403 on `/chat`) are OpenAI's
    // `insufficient_quota`, which its clients know as a 429.
    case 402:
      return make(429, 'insufficient_quota', null, 'insufficient_quota');
    case 403:
      if (e.key === 'TOKEN_LIMIT_EXCEEDED')
        return make(429, 'insufficient_quota', null, 'insufficient_quota');
      return make(403, 'invalid_request_error', null, e.code?.toLowerCase() ?? null);
    case 404:
      return make(404, 'invalid_request_error', null, e.code?.toLowerCase() ?? 'not_found');
    case 409:
      return make(409, 'invalid_request_error', null, e.code?.toLowerCase() ?? 'conflict');
    case 413:
      return make(413, 'invalid_request_error', null, 'request_too_large');
    case 429:
      return make(
        429,
        'requests',
        null,
        e.code === 'RATE_LIMITED' ? 'rate_limit_exceeded' : (e.code?.toLowerCase() ?? null),
      );
    default:
      if (e.status >= 500) return make(e.status, 'server_error', null, e.code?.toLowerCase() ?? null);
      return make(e.status, 'invalid_request_error', null, e.code?.toLowerCase() ?? null);
  }
}

/** Answers with the error in OpenAI's shape; after the headers went out, cuts the connection. */
export function sendOpenAiError(res: ServerResponse, err: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const e = toOpenAiError(err);
  const body = JSON.stringify(openAiErrorBody(e));
  if (e.headers) for (const [k, v] of Object.entries(e.headers)) res.setHeader(k, v);
  res.statusCode = e.status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(body));
  res.end(body);
}
