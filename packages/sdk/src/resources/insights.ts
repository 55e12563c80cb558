import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import { dataMetaPages, PagePromise } from '../core/pagination.js';
import type {
  ConversationDetail,
  ConversationList,
  ConversationListParams,
  ConversationSummary,
  RequestUsage,
  WorkspaceUsage,
} from './types.js';

const BASE = '/insights/conversations';

interface Opts {
  signal?: AbortSignal;
}

/**
 * Conversation analytics (spec 4.11): the workspace's app conversations with their usage and
 * cost, read-only. The workspace id in the paths is the credentials' own
 * (`client.workspaceId()`); API keys only.
 */
export class Conversations {
  constructor(private readonly client: AiSuite) {}

  /**
   * Most recently active first. `limit` 1–100 (default 20), `offset`; `from`/`to` (ISO 8601,
   * inclusive, on `updated_at`); `app_id` (one or several); `user_key` (external user id,
   * anonymous visitor id or session id); `status`.
   */
  list(
    query: ConversationListParams = {},
    opts: Opts = {},
  ): PagePromise<ConversationList, ConversationSummary, ConversationListParams> {
    return new PagePromise(
      (q) =>
        this.client.inWorkspace(BASE, (path) =>
          this.client.request({ method: 'GET', path, query: q, ...opts }),
        ),
      query,
      dataMetaPages(),
    );
  }

  /**
   * One conversation as `{ data }`: messages (content cut at 4000 characters), usage records
   * and the 200 most recent usage events. `NotFoundError` (`Conversation not found`).
   */
  get(threadId: string, opts: Opts = {}): APIPromise<{ data: ConversationDetail }> {
    return this.client.inWorkspace(`${BASE}/${encodeURIComponent(threadId)}`, (path) =>
      this.client.request<{ data: ConversationDetail }>({ method: 'GET', path, ...opts }),
    );
  }
}

export class Insights {
  readonly conversations: Conversations;
  constructor(private readonly client: AiSuite) {
    this.conversations = new Conversations(client);
  }

  /**
   * The workspace's usage over the last `days` days (1–90, default 30): totals, by day, by
   * model, by API key, recent failed calls, credit balance and token quota (an extension).
   */
  usage(query: { days?: number } = {}, opts: Opts = {}): APIPromise<WorkspaceUsage> {
    return this.client.inWorkspace('/insights/usage', (path) =>
      this.client.request<WorkspaceUsage>({ method: 'GET', path, query, ...opts }),
    );
  }

  /**
   * The usage records one request wrote, by the `X-Request-Id` of its response (e.g.
   * `(await stream.response()).headers.get('x-request-id')`). Written just after a stream
   * ends: empty right after it, filled a moment later.
   */
  requestUsage(requestId: string, opts: Opts = {}): APIPromise<RequestUsage> {
    return this.client.inWorkspace(`/insights/usage/requests/${encodeURIComponent(requestId)}`, (path) =>
      this.client.request<RequestUsage>({ method: 'GET', path, ...opts }),
    );
  }
}
