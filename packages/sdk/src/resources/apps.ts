import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import { dataMetaPages, PagePromise } from '../core/pagination.js';
import { AppChatStream } from '../lib/app-chat-stream.js';
import type {
  App,
  AppChatParams,
  AppChatResponse,
  AppChatStreamParams,
  AppCreateParams,
  AppList,
  AppMemoryStatus,
  AppSaveMessagesParams,
  AppSaveMessagesResult,
  AppThread,
  AppThreadCreateParams,
  AppThreadList,
  AppThreadMessage,
  AppThreadMessageList,
  AppThreadUpdateParams,
  AppUpdateParams,
} from './types.js';

interface Opts {
  signal?: AbortSignal;
}
type OffsetQuery = { limit?: number; offset?: number };
type ThreadListQuery = OffsetQuery & { status?: AppThread['status'] };

const seg = encodeURIComponent;

/** Threads of one app (memory). Accepts API keys and widget tokens. */
export class AppThreads {
  constructor(private readonly client: AiSuite) {}

  /** Newest first; `limit` default 20 (capped at 100). */
  list(
    appId: string,
    query: ThreadListQuery = {},
    opts: Opts = {},
  ): PagePromise<AppThreadList, AppThread, ThreadListQuery> {
    return new PagePromise(
      (q) =>
        this.client.request({ method: 'GET', path: `/apps/${seg(appId)}/memory/threads`, query: q, ...opts }),
      query,
      dataMetaPages(),
    );
  }

  /** Title defaults to `New Thread`, metadata to `{}`. Resolves to `{ data: thread }`, as the API answers. */
  create(appId: string, body: AppThreadCreateParams = {}, opts: Opts = {}): APIPromise<{ data: AppThread }> {
    return this.client.request({
      method: 'POST',
      path: `/apps/${seg(appId)}/memory/threads`,
      body,
      ...opts,
    });
  }

  /** `{ data: thread }`; `NotFoundError` (`Thread not found`) for another app's or workspace's thread. */
  get(appId: string, threadId: string, opts: Opts = {}): APIPromise<{ data: AppThread }> {
    return this.client.request({
      method: 'GET',
      path: `/apps/${seg(appId)}/memory/threads/${seg(threadId)}`,
      ...opts,
    });
  }

  /** Only the fields sent change; `status` one of `active`, `archived`, `closed`. Resolves to `{ data: thread }`. */
  update(
    appId: string,
    threadId: string,
    body: AppThreadUpdateParams,
    opts: Opts = {},
  ): APIPromise<{ data: AppThread }> {
    return this.client.request({
      method: 'PATCH',
      path: `/apps/${seg(appId)}/memory/threads/${seg(threadId)}`,
      body,
      ...opts,
    });
  }

  /** Archives the thread (it is never removed). */
  delete(appId: string, threadId: string, opts: Opts = {}): APIPromise<{ success: true; threadId: string }> {
    return this.client.request({
      method: 'DELETE',
      path: `/apps/${seg(appId)}/memory/threads/${seg(threadId)}`,
      ...opts,
    });
  }

  /** Ascending by sequence number; `limit` default 50 (capped at 200). */
  messages(
    appId: string,
    threadId: string,
    query: OffsetQuery = {},
    opts: Opts = {},
  ): PagePromise<AppThreadMessageList, AppThreadMessage, OffsetQuery> {
    return new PagePromise(
      (q) =>
        this.client.request({
          method: 'GET',
          path: `/apps/${seg(appId)}/memory/threads/${seg(threadId)}/messages`,
          query: q,
          ...opts,
        }),
      query,
      dataMetaPages(),
    );
  }
}

/** Apps: management (API key only), chat and memory (API key or widget token). */
export class Apps {
  readonly threads: AppThreads;

  constructor(private readonly client: AiSuite) {
    this.threads = new AppThreads(client);
  }

  /** Creates an app (API key only). Resolves to `{ app }`, as the API answers. */
  create(body: AppCreateParams, opts: Opts = {}): APIPromise<{ app: App }> {
    return this.client.request({ method: 'POST', path: '/apps', body, ...opts });
  }

  list(query: OffsetQuery = {}, opts: Opts = {}): PagePromise<AppList, App, OffsetQuery> {
    return new PagePromise(
      (q) => this.client.request({ method: 'GET', path: '/apps', query: q, ...opts }),
      query,
      dataMetaPages(),
    );
  }

  /** `{ app }`; `AuthenticationError` (`Unauthorized or app not found`) for an app of another workspace. */
  get(appId: string, opts: Opts = {}): APIPromise<{ app: App }> {
    return this.client.request({ method: 'GET', path: `/apps/${seg(appId)}`, ...opts });
  }

  /** Only the fields sent change; `controls` are merged. Resolves to `{ app }`. */
  update(appId: string, body: AppUpdateParams, opts: Opts = {}): APIPromise<{ app: App }> {
    return this.client.request({ method: 'PATCH', path: `/apps/${seg(appId)}`, body, ...opts });
  }

  delete(appId: string, opts: Opts = {}): APIPromise<{ deleted: true; id: string }> {
    return this.client.request({ method: 'DELETE', path: `/apps/${seg(appId)}`, ...opts });
  }

  /** One turn, answered whole. Not retried (a retry would send the message twice). */
  chat(appId: string, body: AppChatParams, opts: Opts = {}): APIPromise<AppChatResponse> {
    return this.client.request({
      method: 'POST',
      path: `/apps/${seg(appId)}/chat/message`,
      body,
      maxRetries: 0,
      ...opts,
    });
  }

  /**
   * One turn, streamed: iterate the returned stream for tokens, then read `done`; or call
   * `finalText()`. Errors before the stream starts (400, 401, 402, 404) are thrown here.
   */
  async chatStream(appId: string, body: AppChatStreamParams, opts: Opts = {}): Promise<AppChatStream> {
    const controller = new AbortController();
    opts.signal?.addEventListener('abort', () => controller.abort(), { once: true });
    const response = await this.client.requestRaw({
      method: 'POST',
      path: `/apps/${seg(appId)}/chat/message/stream`,
      body,
      headers: { accept: 'text/event-stream' },
      maxRetries: 0,
      signal: controller.signal,
    });
    return new AppChatStream(response, controller);
  }

  /** Appends 1 to 100 messages to a thread without a model call. */
  saveMessages(
    appId: string,
    body: AppSaveMessagesParams,
    opts: Opts = {},
  ): APIPromise<AppSaveMessagesResult> {
    return this.client.request({
      method: 'POST',
      path: `/apps/${seg(appId)}/memory/save-messages`,
      body,
      ...opts,
    });
  }

  memoryStatus(appId: string, opts: Opts = {}): APIPromise<AppMemoryStatus> {
    return this.client.request({ method: 'GET', path: `/apps/${seg(appId)}/memory/status`, ...opts });
  }
}
