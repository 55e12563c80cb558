import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import type { ApiKey, CreatedApiKey } from './types.js';

/**
 * The workspace's API keys, managed by a person (a client built with a session token of an
 * owner or admin; members get `PermissionDeniedError`, an API key `AuthenticationError`).
 * Acts in the session's workspace.
 */
export class ApiKeys {
  constructor(private readonly client: AiSuite) {}

  /** Active keys with their usage (`includeRevoked` adds revoked ones). */
  list(
    query: { includeRevoked?: boolean } = {},
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<{ apiKeys: ApiKey[] }> {
    return this.client.inWorkspace('/api-keys', (path) =>
      this.client.request({
        method: 'GET',
        path,
        query: query.includeRevoked === undefined ? {} : { includeRevoked: String(query.includeRevoked) },
        ...opts,
      }),
    );
  }

  /** The plaintext `key` is returned only here. At most 10 active keys (`BadRequestError` after). */
  create(
    body: { name?: string | null } = {},
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<CreatedApiKey> {
    return this.client.inWorkspace('/api-keys', (path) =>
      this.client.request({ method: 'POST', path, body, maxRetries: 0, ...opts }),
    );
  }

  /** Takes effect on the key's next request; `NotFoundError` for unknown or foreign ids. */
  revoke(keyId: string, opts: { signal?: AbortSignal } = {}): APIPromise<{ revoked: true; apiKey: ApiKey }> {
    return this.client.inWorkspace(`/api-keys/${encodeURIComponent(keyId)}`, (path) =>
      this.client.request({ method: 'DELETE', path, ...opts }),
    );
  }
}
