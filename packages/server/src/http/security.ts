import type { IncomingMessage, ServerResponse } from 'node:http';
import helmet from 'helmet';

/** helmet as every `/api/v1` response gets it (JSON and streams: no CSP, cross-origin reads allowed). */
export const apiHelmet = () => helmet({ contentSecurityPolicy: false, crossOriginResourcePolicy: false });

/**
 * The headers `apiHelmet` sets, read once by running it against a recording response: they do
 * not depend on the request, so the fast path copies them instead of running the middleware.
 */
export function apiSecurityHeaders(): Record<string, string> {
  const headers: Record<string, string> = {};
  const recorder = {
    setHeader(name: string, value: string | number | readonly string[]) {
      headers[name] = String(value);
    },
    removeHeader(name: string) {
      delete headers[name];
    },
  };
  apiHelmet()({} as IncomingMessage, recorder as unknown as ServerResponse, () => {});
  return headers;
}
