import { APIPromise } from './core/api-promise.js';
import {
  AiSuiteError,
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  APIUserAbortError,
} from './core/errors.js';
import { Agents } from './resources/agents.js';
import { ApiKeys } from './resources/api-keys.js';
import { Apps } from './resources/apps.js';
import { Artifacts } from './resources/artifacts.js';
import { Auth } from './resources/auth.js';
import { Catalogs } from './resources/catalogs.js';
import { Chat } from './resources/chat.js';
import { Images } from './resources/images.js';
import { Insights } from './resources/insights.js';
import { Members } from './resources/members.js';
import { Models } from './resources/models.js';
import { Rag } from './resources/rag.js';
import { Runs } from './resources/runs.js';
import { Sessions } from './resources/sessions.js';
import { Storage } from './resources/storage.js';
import { ToolServers } from './resources/tool-servers.js';
import type { AuthSession, Me } from './resources/types.js';
import { WidgetTokens } from './resources/widget-tokens.js';

export interface ClientOptions {
  /** Workspace API key (`svc_ai_…`). Defaults to `process.env.AI_SUITE_API_KEY`. */
  apiKey?: string;
  /**
   * A widget token instead of an API key, for browser code talking to the Apps endpoints.
   * Never put an API key in client-side code.
   */
  widgetToken?: string;
  /**
   * A person's session token (`svc_ss_…`, from `client.auth.signIn`) instead of an API key:
   * what key management, members, tool servers and RAG require. Defaults to
   * `process.env.AI_SUITE_SESSION_TOKEN` when no API key or widget token is given.
   */
  sessionToken?: string;
  /**
   * `fetch`'s credentials mode. A web page whose session is its cookie sets `'same-origin'` (or
   * `'include'`) and no token: no key or token is read from the environment, no Authorization
   * is sent, and `auth.signIn` leaves the token to the cookie instead of keeping it in script.
   */
  credentials?: RequestCredentials;
  /**
   * Server origin, `…/api/v1` URL, or the web console's mount of the API (`…/console-api/v1`,
   * sessions only). Defaults to `AI_SUITE_BASE_URL` or `http://localhost:8080`.
   */
  baseURL?: string;
  /** Per-request timeout in ms (default 60 000). Streams time out only while waiting for headers. */
  timeout?: number;
  /** Retries on connection errors, 408, 409, 429 and 5xx (default 2). */
  maxRetries?: number;
  /** Custom fetch (default: global fetch). */
  fetch?: typeof fetch;
  defaultHeaders?: Record<string, string>;
}

export interface RequestOptions {
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
  path: string;
  query?: Record<string, string | number | boolean | string[] | undefined | null>;
  /** JSON body, or a ready body (FormData, stream) with `rawBody`. */
  body?: unknown;
  rawBody?: BodyInit;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  timeout?: number;
  maxRetries?: number;
  /** Send no credentials (public catalogs). */
  noAuth?: boolean;
}

const env = (name: string): string | undefined =>
  typeof process !== 'undefined' ? process.env?.[name] : undefined;

const DEFAULT_TIMEOUT = 60_000;
const MAX_RETRY_DELAY = 8_000;

export function normalizeBaseURL(input: string): string {
  const trimmed = input.replace(/\/+$/, '');
  return /\/(api|console-api)\/v1$/.test(trimmed) ? trimmed : `${trimmed}/api/v1`;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        reject(new APIUserAbortError());
      },
      { once: true },
    );
  });

/**
 * The AI Suite client. One instance per API key; resources hang off it
 * (`client.catalogs`, `client.chat`, …).
 */
export class AiSuite {
  readonly baseURL: string;
  readonly timeout: number;
  readonly maxRetries: number;
  private readonly apiKey: string | undefined;
  private readonly widgetToken: string | undefined;
  private readonly credentials: RequestCredentials | undefined;
  /** The session is the browser's cookie: no token is kept in script. */
  private readonly cookieMode: boolean;
  private sessionTokenValue: string | undefined;
  private sessionWorkspace: Promise<string> | undefined;
  private readonly fetchImpl: typeof fetch;
  private readonly defaultHeaders: Record<string, string>;
  private mePromise: Promise<Me> | undefined;

  readonly catalogs: Catalogs;
  readonly chat: Chat;
  readonly storage: Storage;
  readonly apps: Apps;
  readonly widgetTokens: WidgetTokens;
  readonly runs: Runs;
  readonly agents: Agents;
  readonly sessions: Sessions;
  readonly insights: Insights;
  readonly artifacts: Artifacts;
  readonly images: Images;
  readonly models: Models;
  readonly auth: Auth;
  readonly apiKeys: ApiKeys;
  readonly members: Members;
  readonly toolServers: ToolServers;
  readonly rag: Rag;

  constructor(opts: ClientOptions = {}) {
    this.credentials = opts.credentials;
    this.cookieMode = !!opts.credentials && !opts.apiKey && !opts.widgetToken && !opts.sessionToken;
    this.apiKey =
      opts.apiKey ??
      (opts.widgetToken || opts.sessionToken || this.cookieMode ? undefined : env('AI_SUITE_API_KEY'));
    this.widgetToken = opts.widgetToken;
    this.sessionTokenValue =
      opts.sessionToken ??
      (this.apiKey || this.widgetToken || this.cookieMode ? undefined : env('AI_SUITE_SESSION_TOKEN'));
    this.baseURL = normalizeBaseURL(opts.baseURL ?? env('AI_SUITE_BASE_URL') ?? 'http://localhost:8080');
    this.timeout = opts.timeout ?? DEFAULT_TIMEOUT;
    this.maxRetries = opts.maxRetries ?? 2;
    this.fetchImpl = opts.fetch ?? ((...args) => fetch(...args));
    this.defaultHeaders = opts.defaultHeaders ?? {};
    this.catalogs = new Catalogs(this);
    this.chat = new Chat(this);
    this.storage = new Storage(this);
    this.apps = new Apps(this);
    this.widgetTokens = new WidgetTokens(this);
    this.runs = new Runs(this);
    this.agents = new Agents(this);
    this.sessions = new Sessions(this);
    this.insights = new Insights(this);
    this.artifacts = new Artifacts(this);
    this.images = new Images(this);
    this.models = new Models(this);
    this.auth = new Auth(this);
    this.apiKeys = new ApiKeys(this);
    this.members = new Members(this);
    this.toolServers = new ToolServers(this);
    this.rag = new Rag(this);
  }

  /**
   * Options for any OpenAI client, SDK or framework that takes a base URL (`new OpenAI(...)`,
   * the Vercel AI SDK's `createOpenAICompatible`, LangChain's `ChatOpenAI`): this server's
   * OpenAI-compatible surface (`<baseURL>/openai`) with this client's API key. Agents are models
   * there as `agent/<agentId>` (docs/openai-compatible.md). The surface takes API keys only.
   */
  openAICompatible(): { baseURL: string; apiKey: string } {
    if (!this.apiKey)
      throw new AiSuiteError('The OpenAI-compatible surface takes an API key: create the client with apiKey');
    return {
      baseURL: `${this.baseURL.replace(/\/console-api\/v1$/, '/api/v1')}/openai`,
      apiKey: this.apiKey,
    };
  }

  /** The session token the client sends, if it acts as a person (it changes on sign-in and workspace switch). */
  get sessionToken(): string | undefined {
    return this.sessionTokenValue;
  }

  /**
   * Replaces the session token (sign-in and workspace switch rotate it; `auth` calls this for
   * you). The cached workspace is forgotten.
   */
  setSessionToken(token: string | undefined): void {
    // In cookie mode the browser holds the session (HttpOnly): the script keeps no copy.
    this.sessionTokenValue = this.cookieMode ? undefined : token;
    this.sessionWorkspace = undefined;
    this.mePromise = undefined;
  }

  /** The workspace and key behind the credentials (`GET /me`), fetched once and cached. */
  me(): Promise<Me> {
    this.mePromise ??= this.request<Me>({ method: 'GET', path: '/me' }).then(
      (v) => v,
      (err) => {
        this.mePromise = undefined;
        throw err;
      },
    );
    return this.mePromise;
  }

  /** The workspace id of the credentials; workspace-scoped resources use it. */
  async workspaceId(): Promise<string> {
    if (this.sessionTokenValue && !this.apiKey && !this.widgetToken) {
      this.sessionWorkspace ??= this.request<AuthSession>({ method: 'GET', path: '/auth/session' }).then(
        (s) => {
          if (!s.workspace) {
            throw new AiSuiteError(
              'The session acts in no workspace: call client.auth.switchWorkspace first',
            );
          }
          return s.workspace.id;
        },
      );
      return this.sessionWorkspace.catch((err) => {
        this.sessionWorkspace = undefined;
        throw err;
      });
    }
    return (await this.me()).workspace.id;
  }

  /** `/workspaces/{id}<suffix>` for the credentials' workspace. */
  async workspacePath(suffix: string): Promise<string> {
    return `/workspaces/${encodeURIComponent(await this.workspaceId())}${suffix}`;
  }

  /** A request under the credentials' workspace path (storage, insights). */
  inWorkspace<T>(suffix: string, fn: (path: string) => APIPromise<T>): APIPromise<T> {
    return new APIPromise(this.workspacePath(suffix).then((p) => fn(p).withResponse()));
  }

  /** A JSON request with retries; resolves to the parsed body. */
  request<T>(opts: RequestOptions): APIPromise<T> {
    return new APIPromise(
      this.fetchWithRetries(opts).then(async (response) => {
        const text = await response.text();
        const data = (text ? JSON.parse(text) : undefined) as T;
        return { data, response };
      }),
    );
  }

  /**
   * A request whose body the caller reads (streams, downloads). Retries happen only before
   * the response arrives; an error status is thrown as an `APIError`.
   */
  async requestRaw(opts: RequestOptions): Promise<Response> {
    return this.fetchWithRetries(opts, { streaming: true });
  }

  buildURL(path: string, query?: RequestOptions['query']): string {
    const url = new URL(this.baseURL + path);
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined || v === null) continue;
      if (Array.isArray(v)) for (const item of v) url.searchParams.append(k, item);
      else url.searchParams.set(k, String(v));
    }
    return url.toString();
  }

  authHeaders(): Record<string, string> {
    const token = this.apiKey ?? this.widgetToken ?? this.sessionTokenValue;
    return token ? { authorization: `Bearer ${token}` } : {};
  }

  private async fetchWithRetries(
    opts: RequestOptions,
    mode: { streaming?: boolean } = {},
  ): Promise<Response> {
    const maxRetries = opts.maxRetries ?? this.maxRetries;
    const url = this.buildURL(opts.path, opts.query);
    for (let attempt = 0; ; attempt++) {
      const headers: Record<string, string> = {
        accept: 'application/json',
        ...this.defaultHeaders,
        ...(opts.noAuth ? {} : this.authHeaders()),
        ...opts.headers,
      };
      let body: BodyInit | undefined = opts.rawBody;
      if (body === undefined && opts.body !== undefined) {
        headers['content-type'] = 'application/json';
        body = JSON.stringify(opts.body);
      }
      const timeout = opts.timeout ?? this.timeout;
      const controller = new AbortController();
      const onAbort = () => controller.abort();
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      if (opts.signal?.aborted) controller.abort();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, timeout);
      let response: Response;
      try {
        response = await this.fetchImpl(url, {
          method: opts.method,
          headers,
          body,
          signal: controller.signal,
          ...(this.credentials ? { credentials: this.credentials } : {}),
          ...(body && typeof (body as ReadableStream).getReader === 'function' ? { duplex: 'half' } : {}),
        } as RequestInit);
      } catch (err) {
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
        if (opts.signal?.aborted) throw new APIUserAbortError();
        const error = timedOut
          ? new APIConnectionTimeoutError()
          : new APIConnectionError(undefined, { cause: err });
        const replayable = !(body && typeof (body as ReadableStream).getReader === 'function');
        if (attempt < maxRetries && replayable) {
          await sleep(this.retryDelay(attempt), opts.signal);
          continue;
        }
        throw error;
      }
      // For streams the timeout covers only the wait for headers.
      if (mode.streaming) clearTimeout(timer);
      if (response.ok) {
        if (!mode.streaming) {
          // Keep the timer until the body is read by `request`.
          const done = () => {
            clearTimeout(timer);
            opts.signal?.removeEventListener('abort', onAbort);
          };
          const text = await response.text().finally(done);
          return new Response(text, {
            status: response.status,
            statusText: response.statusText,
            headers: response.headers,
          });
        }
        // Keep listening to the caller's signal: aborting it cancels the stream.
        return response;
      }
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      const text = await response.text().catch(() => '');
      let parsed: unknown = text;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        /* not JSON */
      }
      const replayable = !(opts.rawBody && typeof (opts.rawBody as ReadableStream).getReader === 'function');
      if (attempt < maxRetries && replayable && this.shouldRetry(response)) {
        await sleep(this.retryDelay(attempt, response.headers), opts.signal);
        continue;
      }
      throw APIError.from(response.status, parsed, response.headers, text || response.statusText);
    }
  }

  private shouldRetry(res: Response): boolean {
    const hint = res.headers.get('x-should-retry');
    if (hint === 'true') return true;
    if (hint === 'false') return false;
    return res.status === 408 || res.status === 409 || res.status === 429 || res.status >= 500;
  }

  private retryDelay(attempt: number, headers?: Headers): number {
    const ms = headers?.get('retry-after-ms');
    if (ms && /^\d+$/.test(ms)) return Math.min(Number(ms), 60_000);
    const ra = headers?.get('retry-after');
    if (ra) {
      if (/^\d+(\.\d+)?$/.test(ra)) return Math.min(Number(ra) * 1000, 60_000);
      const date = Date.parse(ra);
      if (!Number.isNaN(date)) return Math.max(0, Math.min(date - Date.now(), 60_000));
    }
    const base = Math.min(500 * 2 ** attempt, MAX_RETRY_DELAY);
    return base * (1 - Math.random() * 0.25);
  }
}

export { AiSuiteError };
