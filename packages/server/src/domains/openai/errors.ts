/**
 * Errors of the OpenAI-compatible surface (`/api/v1/openai`) in OpenAI's shape,
 * `{error: {message, type, param, code}}`, with the statuses the official clients map to their
 * error classes. The native routes keep the spec's `{error, code?, details?}`.
 */
export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/**
 * An error of this surface, already in OpenAI's terms. Not an `AppError`: its statuses and
 * messages are OpenAI's, not rows of the service's error table; `sendOpenAiError` renders it.
 */
export class OpenAiError extends Error {
  override name = 'OpenAiError';
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null = null,
    readonly oaCode: string | null = null,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
  }
}

/** 400 `invalid_request_error` naming the parameter at fault. */
export const invalidRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new OpenAiError(400, message, 'invalid_request_error', param, code);

/** A parameter this service cannot honour: refused, never silently dropped. */
export const unsupported = (param: string, why = 'is not supported by this service') =>
  invalidRequest(`The parameter \`${param}\` ${why}.`, param, 'unsupported_parameter');

export const modelNotFound = (model: string) =>
  new OpenAiError(
    404,
    `The model \`${model}\` does not exist or you do not have access to it.`,
    'invalid_request_error',
    'model',
    'model_not_found',
  );

/**
 * OpenAI's `x-ratelimit-*` request headers beside the native `RateLimit-*` ones (the official
 * clients and several frameworks read these names).
 */
export function withOpenAiRateHeaders(headers: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = { ...(headers ?? {}) };
  const limit = headers?.['RateLimit-Limit'];
  if (limit !== undefined) {
    out['x-ratelimit-limit-requests'] = limit;
    out['x-ratelimit-remaining-requests'] = headers?.['RateLimit-Remaining'] ?? '0';
    out['x-ratelimit-reset-requests'] = `${headers?.['RateLimit-Reset'] ?? '1'}s`;
  }
  return out;
}

export function openAiErrorBody(e: OpenAiError): OpenAiErrorBody {
  return { error: { message: e.message, type: e.type, param: e.param, code: e.oaCode } };
}
