import type { IncomingMessage } from 'node:http';
import { bearerToken, isWellFormedApiKey } from '../../auth/api-keys.js';
import type { Principal } from '../../auth/principal.js';
import { OpenAiError } from './errors.js';

/** A Node request as the fast path and express both hand it over. */
export type OpenAiRequest = IncomingMessage & {
  requestId?: string;
  principal?: Principal;
  body?: unknown;
  consoleApi?: boolean;
};

export const API_KEYS_ONLY = new OpenAiError(
  401,
  'This surface takes workspace API keys only (Authorization: Bearer svc_ai_…); widget tokens and console sessions are refused.',
  'invalid_request_error',
  null,
  'invalid_api_key',
);

/** The well-formed API key of a request, or the 401 this surface answers. */
export function requireApiKey(req: OpenAiRequest): string {
  if (req.consoleApi) throw API_KEYS_ONLY;
  const key = bearerToken(req.headers.authorization);
  if (!key || !isWellFormedApiKey(key)) throw API_KEYS_ONLY;
  return key;
}
