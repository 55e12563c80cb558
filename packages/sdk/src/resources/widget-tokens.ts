import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import type { CreatedWidgetToken, WidgetToken, WidgetTokenCreateParams } from './types.js';

/**
 * Widget tokens for browser widgets (server side, API key only): issue one per page view or
 * end user, hand `token` to the browser, and build `new AiSuite({ widgetToken, baseURL })` there.
 */
export class WidgetTokens {
  constructor(private readonly client: AiSuite) {}

  /** The plaintext `token` is returned only here. */
  create(
    body: WidgetTokenCreateParams = {},
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<CreatedWidgetToken> {
    return this.client.request({ method: 'POST', path: '/widget-tokens', body, maxRetries: 0, ...opts });
  }

  list(opts: { signal?: AbortSignal } = {}): APIPromise<{ data: WidgetToken[] }> {
    return this.client.request({ method: 'GET', path: '/widget-tokens', ...opts });
  }

  /** Takes effect on the token's next request. */
  revoke(
    tokenId: string,
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<{ revoked: true; widgetToken: WidgetToken }> {
    return this.client.request({
      method: 'DELETE',
      path: `/widget-tokens/${encodeURIComponent(tokenId)}`,
      ...opts,
    });
  }
}
