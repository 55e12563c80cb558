import { AiSuite, APIError } from '@ai-suite/sdk';

/**
 * The console's one client: the project's SDK on the console mount of the API, authenticated
 * by the session cookie this origin holds (decision 0025). No token is ever kept in script.
 */
export const client = new AiSuite({
  baseURL: `${window.location.origin}/console-api/v1`,
  credentials: 'same-origin',
  maxRetries: 1,
});

/** A human sentence for any failure: the API's `error` message when there is one. */
export function errorMessage(err: unknown): string {
  if (err instanceof APIError) return err.message || `Request failed (${err.status})`;
  if (err instanceof Error) return err.message;
  return String(err);
}
