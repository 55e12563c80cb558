/** Base class of every error the SDK throws. */
export class AiSuiteError extends Error {
  override name = 'AiSuiteError';
}

/** The server answered with a non-2xx status. Carries the standard `{ error, code?, details? }` body. */
export class APIError extends AiSuiteError {
  override name = 'APIError';
  /** HTTP status. */
  readonly status: number;
  /** Machine-readable code from the body, e.g. `INSUFFICIENT_CREDITS`. */
  readonly code: string | undefined;
  readonly details: Record<string, unknown> | undefined;
  /** `X-Request-Id` of the failed request, for support. */
  readonly requestId: string | undefined;
  readonly headers: Headers;
  /** The parsed body, when it was JSON. */
  readonly body: unknown;

  constructor(status: number, body: unknown, headers: Headers, fallbackMessage?: string) {
    const b = (body && typeof body === 'object' ? body : {}) as {
      error?: unknown;
      code?: unknown;
      details?: unknown;
    };
    const message =
      typeof b.error === 'string' ? b.error : (fallbackMessage ?? `Request failed with status ${status}`);
    super(message);
    this.status = status;
    this.code = typeof b.code === 'string' ? b.code : undefined;
    this.details =
      b.details && typeof b.details === 'object' ? (b.details as Record<string, unknown>) : undefined;
    this.requestId = headers.get('x-request-id') ?? undefined;
    this.headers = headers;
    this.body = body;
  }

  static from(status: number, body: unknown, headers: Headers, fallbackMessage?: string): APIError {
    const Cls = errorClassFor(status);
    return new Cls(status, body, headers, fallbackMessage);
  }
}

export class BadRequestError extends APIError {
  override name = 'BadRequestError';
}
export class AuthenticationError extends APIError {
  override name = 'AuthenticationError';
}
/** 402: the workspace is out of credits (`code` is `INSUFFICIENT_CREDITS`). */
export class InsufficientCreditsError extends APIError {
  override name = 'InsufficientCreditsError';
}
export class PermissionDeniedError extends APIError {
  override name = 'PermissionDeniedError';
}
export class NotFoundError extends APIError {
  override name = 'NotFoundError';
}
export class ConflictError extends APIError {
  override name = 'ConflictError';
}
export class PayloadTooLargeError extends APIError {
  override name = 'PayloadTooLargeError';
}
export class UnprocessableEntityError extends APIError {
  override name = 'UnprocessableEntityError';
}
export class RateLimitError extends APIError {
  override name = 'RateLimitError';
  /** Seconds to wait, from `Retry-After`, when the server sent it. */
  get retryAfter(): number | undefined {
    const v = this.headers.get('retry-after');
    return v && /^\d+$/.test(v) ? Number(v) : undefined;
  }
}
export class InternalServerError extends APIError {
  override name = 'InternalServerError';
}
/** 502: the model provider or another upstream failed. */
export class BadGatewayError extends InternalServerError {
  override name = 'BadGatewayError';
}
/** 503: e.g. `No AI model configured`. */
export class ServiceUnavailableError extends InternalServerError {
  override name = 'ServiceUnavailableError';
}

/** The request never got an HTTP answer (DNS, refused connection, reset). */
export class APIConnectionError extends AiSuiteError {
  override name = 'APIConnectionError';
  constructor(message = 'Connection error.', options?: { cause?: unknown }) {
    super(message, options);
  }
}
export class APIConnectionTimeoutError extends APIConnectionError {
  override name = 'APIConnectionTimeoutError';
  constructor(message = 'Request timed out.') {
    super(message);
  }
}
/** The caller aborted (AbortSignal, or `break` out of a stream). */
export class APIUserAbortError extends AiSuiteError {
  override name = 'APIUserAbortError';
  constructor(message = 'Request was aborted.') {
    super(message);
  }
}

function errorClassFor(status: number): typeof APIError {
  switch (status) {
    case 400:
      return BadRequestError;
    case 401:
      return AuthenticationError;
    case 402:
      return InsufficientCreditsError;
    case 403:
      return PermissionDeniedError;
    case 404:
      return NotFoundError;
    case 409:
      return ConflictError;
    case 413:
      return PayloadTooLargeError;
    case 422:
      return UnprocessableEntityError;
    case 429:
      return RateLimitError;
    case 502:
      return BadGatewayError;
    case 503:
      return ServiceUnavailableError;
    default:
      return status >= 500 ? InternalServerError : APIError;
  }
}
