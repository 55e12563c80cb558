/**
 * Whether an error means the database (or the connection to it) is unavailable for now,
 * rather than that the request or the code is wrong: the server restarting, shutting down or
 * refusing connections, a connection cut or timed out, a pool that cannot get one. Such a
 * request may succeed when tried again a little later (docs/errors.md: 503 with `Retry-After`).
 *
 * Errors arrive as the driver made them (`pg`: a network error with a `code`, a server error
 * with its SQLSTATE, a pool timeout) or wrapped by MikroORM (a `DriverException` that keeps the
 * original `code`) or by our own code (`cause`), so the chain is walked.
 */
const UNAVAILABLE_CODES = new Set([
  // The connection, at the network level.
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  // SQLSTATE class 08: connection exception.
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  // Operator intervention: admin_shutdown, crash_shutdown, cannot_connect_now (starting up).
  '57P01',
  '57P02',
  '57P03',
  // too_many_connections.
  '53300',
]);

const UNAVAILABLE_MESSAGES = [
  /Connection terminated/i, // pg: the server closed the connection
  /timeout exceeded when trying to connect/i, // pg-pool: no connection within connectionTimeoutMillis
  /Timeout acquiring a connection/i, // knex (tarn) pool
  /Client has encountered a connection error and is not queryable/i,
  /Connection is closed/i,
];

interface ErrorLike {
  code?: unknown;
  syscall?: unknown;
  message?: unknown;
  name?: unknown;
  cause?: unknown;
  previous?: unknown;
  errors?: unknown;
}

export function isDatabaseUnavailable(err: unknown, depth = 0): boolean {
  if (!err || typeof err !== 'object' || depth > 6) return false;
  const e = err as ErrorLike;
  if (typeof e.code === 'string') {
    if (UNAVAILABLE_CODES.has(e.code)) return true;
    // A unix socket that is gone (the embedded engine's, when its owner has stopped).
    if (e.code === 'ENOENT' && e.syscall === 'connect') return true;
  }
  if (e.name === 'KnexTimeoutError') return true;
  if (typeof e.message === 'string' && UNAVAILABLE_MESSAGES.some((m) => m.test(e.message as string)))
    return true;
  if (Array.isArray(e.errors) && e.errors.some((x) => isDatabaseUnavailable(x, depth + 1))) return true;
  return isDatabaseUnavailable(e.cause, depth + 1) || isDatabaseUnavailable(e.previous, depth + 1);
}
