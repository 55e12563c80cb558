import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import { dataMetaPages, PagePromise } from '../core/pagination.js';
import type { CreatedWidgetToken, WidgetToken, WidgetTokenCreateParams, WidgetTokenList } from './types.js';

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

  /** Newest first, `limit` default 50 (clamped to 1..200); iterate for every token. */
  list(
    query: { limit?: number; offset?: number } = {},
    opts: { signal?: AbortSignal } = {},
  ): PagePromise<WidgetTokenList, WidgetToken, { limit?: number; offset?: number }> {
    return new PagePromise(
      (q) => this.client.request({ method: 'GET', path: '/widget-tokens', query: q, ...opts }),
      query,
      dataMetaPages(),
    );
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
