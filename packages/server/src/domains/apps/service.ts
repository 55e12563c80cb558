import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Principal } from '../../auth/principal.js';
import { appError } from '../../errors/index.js';
import type {
  AppDto,
  Controls,
  CreateAppInput,
  SaveMessagesInput,
  ThreadDto,
  ThreadMessageDto,
  UpdateAppInput,
} from './schema.js';

export const MICROS_PER_USD = 1_000_000;
export const THREAD_PAGE = { default: 20, max: 100 };
export const MESSAGE_PAGE = { default: 50, max: 200 };
export const APPS_PAGE = { default: 50, max: 200 };

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (s: string | undefined): s is string => !!s && UUID.test(s);

export const appNotFound = () => appError('APP_UNAUTHORIZED');

/**
 * An app of the workspace named by id in a request body (widget tokens, artifacts): 404
 * `APP_NOT_FOUND` for an unknown, foreign or malformed id.
 */
export async function assertWorkspaceApp(
  em: EntityManager,
  workspaceId: string,
  appId: string,
): Promise<void> {
  const rows = isUuid(appId)
    ? await em.execute<{ id: string }[]>(
        `select id from apps where id = ? and workspace_id = ? and app_type = 'app'`,
        [appId, workspaceId],
      )
    : [];
  if (!rows[0]) throw appError('APP_NOT_FOUND');
}
export const threadNotFound = () => appError('THREAD_NOT_FOUND');

export const clampPage = (
  limit: number | undefined,
  offset: number | undefined,
  page: { default: number; max: number },
) => ({
  limit: Math.min(Math.max(limit ?? page.default, 1), page.max),
  offset: Math.max(offset ?? 0, 0),
});

const iso = (d: Date | string) => new Date(d).toISOString();

export interface AppRow {
  id: string;
  workspace_id: string;
  name: string;
  description: string | null;
  system_prompt: string | null;
  model_id: string | null;
  config: Record<string, unknown> | null;
  status: 'active' | 'draft';
  created_at: Date;
  updated_at: Date;
}

export const appControls = (app: AppRow): Controls => {
  const c = (app.config?.controls ?? {}) as Controls;
  const out: Controls = {};
  if (typeof c.temperature === 'number') out.temperature = c.temperature;
  if (typeof c.maxTokens === 'number') out.maxTokens = c.maxTokens;
  if (typeof c.maxContextMessages === 'number') out.maxContextMessages = c.maxContextMessages;
  return out;
};

export const toAppDto = (r: AppRow): AppDto => ({
  id: r.id,
  appType: 'app',
  name: r.name,
  description: r.description,
  systemPrompt: r.system_prompt,
  model: r.model_id,
  controls: appControls(r),
  status: r.status,
  createdAt: iso(r.created_at),
  updatedAt: iso(r.updated_at),
});

export interface ThreadRow {
  id: string;
  workspace_id: string;
  app_id: string;
  session_id: string | null;
  title: string;
  status: ThreadDto['status'];
  message_count: number;
  metadata: Record<string, unknown> | null;
  created_at: Date;
  updated_at: Date;
}

export const toThreadDto = (r: ThreadRow): ThreadDto => ({
  id: r.id,
  app_id: r.app_id,
  workspace_id: r.workspace_id,
  session_id: r.session_id,
  title: r.title,
  status: r.status,
  message_count: Number(r.message_count),
  metadata: r.metadata ?? {},
  created_at: iso(r.created_at),
  updated_at: iso(r.updated_at),
});

interface MessageRow {
  id: string;
  workspace_id: string;
  app_id: string;
  thread_id: string;
  role: ThreadMessageDto['role'];
  content: string;
  sequence_number: number;
  request_id: string | null;
  turn_id: string | null;
  provider_status: string;
  error_code: string | null;
  latency_ms: number;
  input_tokens: number;
  output_tokens: number;
  cost_micros: string | number;
  rag_sources: unknown[] | null;
  metadata: Record<string, unknown> | null;
  created_at: Date;
}

export const toMessageDto = (r: MessageRow): ThreadMessageDto => ({
  id: r.id,
  workspace_id: r.workspace_id,
  app_id: r.app_id,
  thread_id: r.thread_id,
  role: r.role,
  content: r.content,
  sequence_number: Number(r.sequence_number),
  request_id: r.request_id,
  turn_id: r.turn_id,
  provider_status: r.provider_status,
  error_code: r.error_code,
  latency_ms: Number(r.latency_ms),
  input_tokens: Number(r.input_tokens),
  output_tokens: Number(r.output_tokens),
  cost_usd: Number(r.cost_micros) / MICROS_PER_USD,
  rag_sources: r.rag_sources ?? [],
  metadata: r.metadata ?? {},
  created_at: iso(r.created_at),
});

/** One message to append to a thread; the sequence number is assigned on write. */
export interface NewMessage {
  role: 'user' | 'assistant' | 'system';
  content: string;
  requestId?: string | null;
  turnId?: string | null;
  providerStatus: string;
  errorCode?: string | null;
  latencyMs?: number;
  inputTokens?: number;
  outputTokens?: number;
  costMicros?: number;
  metadata?: Record<string, unknown>;
}

/**
 * Appends messages with gapless, ordered sequence numbers. Bumping the thread's counter and
 * reading the new value is one statement, and its row lock is held until the surrounding
 * transaction ends, so concurrent writers to one thread queue up; a rolled-back write
 * releases its numbers with it. Call inside a transaction.
 */
export async function appendMessages(
  tx: EntityManager,
  thread: { id: string; workspaceId: string; appId: string },
  messages: NewMessage[],
): Promise<{ ids: string[]; firstSequence: number }> {
  const bumped = await tx.execute<{ message_count: number }[]>(
    'update app_threads set message_count = message_count + ?, updated_at = now() where id = ? returning message_count',
    [messages.length, thread.id],
  );
  if (!bumped[0]) throw threadNotFound();
  const first = Number(bumped[0].message_count) - messages.length + 1;
  const ids: string[] = [];
  const values: string[] = [];
  const params: unknown[] = [];
  messages.forEach((m, i) => {
    const id = randomUUID();
    ids.push(id);
    values.push('(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::jsonb)');
    params.push(
      id,
      thread.workspaceId,
      thread.appId,
      thread.id,
      m.role,
      m.content,
      first + i,
      m.requestId ?? null,
      m.turnId ?? null,
      m.providerStatus,
      m.errorCode ?? null,
      Math.max(0, Math.round(m.latencyMs ?? 0)),
      m.inputTokens ?? 0,
      m.outputTokens ?? 0,
      m.costMicros ?? 0,
      JSON.stringify(m.metadata ?? {}),
    );
  });
  await tx.execute(
    `insert into app_thread_messages
       (id, workspace_id, app_id, thread_id, role, content, sequence_number, request_id, turn_id,
        provider_status, error_code, latency_ms, input_tokens, output_tokens, cost_micros, metadata)
     values ${values.join(', ')}`,
    params,
  );
  return { ids, firstSequence: first };
}

/** The extension CRUD of apps (`app_type = 'app'` rows only; agents have their own API). */
export class AppsService {
  constructor(
    private readonly em: EntityManager,
    private readonly principal: Principal,
  ) {}

  async list(page: { limit?: number; offset?: number }) {
    const { limit, offset } = clampPage(page.limit, page.offset, APPS_PAGE);
    const ws = this.principal.workspaceId;
    const rows = await this.em.execute<AppRow[]>(
      `select * from apps where workspace_id = ? and app_type = 'app'
        order by created_at desc, id limit ? offset ?`,
      [ws, limit, offset],
    );
    const total = await this.em.execute<{ n: string }[]>(
      `select count(*) as n from apps where workspace_id = ? and app_type = 'app'`,
      [ws],
    );
    return { data: rows.map(toAppDto), meta: { limit, offset, total: Number(total[0]?.n ?? 0) } };
  }

  /** The app if it is an app (not an agent) of the caller's workspace and scope; else 401. */
  async require(appId: string): Promise<AppRow> {
    if (!isUuid(appId)) throw appNotFound();
    if (this.principal.appId && this.principal.appId !== appId) throw appNotFound();
    const rows = await this.em.execute<AppRow[]>(
      `select * from apps where id = ? and workspace_id = ? and app_type = 'app'`,
      [appId, this.principal.workspaceId],
    );
    if (!rows[0]) throw appNotFound();
    return rows[0];
  }

  async get(appId: string): Promise<AppDto> {
    return toAppDto(await this.require(appId));
  }

  async create(input: CreateAppInput): Promise<AppDto> {
    const id = randomUUID();
    const rows = await this.em.execute<AppRow[]>(
      `insert into apps (id, workspace_id, app_type, name, description, system_prompt, model_id, config, status)
       values (?, ?, 'app', ?, ?, ?, ?, ?::jsonb, ?) returning *`,
      [
        id,
        this.principal.workspaceId,
        input.name,
        input.description ?? null,
        input.systemPrompt ?? null,
        input.model ?? null,
        JSON.stringify({ controls: input.controls ?? {} }),
        input.status ?? 'active',
      ],
    );
    return toAppDto(rows[0] as AppRow);
  }

  async update(input: UpdateAppInput): Promise<AppDto> {
    const app = await this.require(input.appId);
    const sets: string[] = [];
    const params: unknown[] = [];
    const set = (col: string, v: unknown, cast = '') => {
      sets.push(`${col} = ?${cast}`);
      params.push(v);
    };
    if (input.name !== undefined) set('name', input.name);
    if (input.description !== undefined) set('description', input.description);
    if (input.systemPrompt !== undefined) set('system_prompt', input.systemPrompt);
    if (input.model !== undefined) set('model_id', input.model);
    if (input.status !== undefined) set('status', input.status);
    if (input.controls !== undefined) {
      const controls = { ...appControls(app), ...input.controls };
      set('config', JSON.stringify({ ...(app.config ?? {}), controls }), '::jsonb');
    }
    if (sets.length === 0) return toAppDto(app);
    params.push(app.id, this.principal.workspaceId);
    const rows = await this.em.execute<AppRow[]>(
      `update apps set ${sets.join(', ')}, updated_at = now()
        where id = ? and workspace_id = ? and app_type = 'app' returning *`,
      params,
    );
    if (!rows[0]) throw appNotFound();
    return toAppDto(rows[0]);
  }

  /** Removes the app with its threads and messages (and its app-scoped widget tokens). */
  async delete(appId: string): Promise<{ deleted: true; id: string }> {
    const app = await this.require(appId);
    await this.em.execute(`delete from apps where id = ? and workspace_id = ? and app_type = 'app'`, [
      app.id,
      this.principal.workspaceId,
    ]);
    return { deleted: true, id: app.id };
  }
}

/** Threads and messages of one app (spec 4.7). */
export class MemoryService {
  constructor(
    private readonly em: EntityManager,
    private readonly principal: Principal,
  ) {}

  private get apps() {
    return new AppsService(this.em, this.principal);
  }

  /** Threads a subject-bound widget token may see: only its end user's. */
  private subjectFilter(alias = ''): { sql: string; params: unknown[] } {
    const s = this.principal.widgetSubject;
    if (!s) return { sql: '', params: [] };
    return { sql: ` and ${alias}metadata ->> 'external_user_id' = ?`, params: [s] };
  }

  async listThreads(appId: string, q: { limit?: number; offset?: number; status?: ThreadDto['status'] }) {
    const app = await this.apps.require(appId);
    const { limit, offset } = clampPage(q.limit, q.offset, THREAD_PAGE);
    const sub = this.subjectFilter();
    const where = `workspace_id = ? and app_id = ?${q.status ? ' and status = ?' : ''}${sub.sql}`;
    const params = [this.principal.workspaceId, app.id, ...(q.status ? [q.status] : []), ...sub.params];
    const rows = await this.em.execute<ThreadRow[]>(
      `select * from app_threads where ${where} order by updated_at desc, id limit ? offset ?`,
      [...params, limit, offset],
    );
    const total = await this.em.execute<{ n: string }[]>(
      `select count(*) as n from app_threads where ${where}`,
      params,
    );
    return { data: rows.map(toThreadDto), meta: { limit, offset, total: Number(total[0]?.n ?? 0) } };
  }

  async createThread(
    appId: string,
    input: { title?: string; metadata?: Record<string, unknown>; sessionId?: string | null },
  ): Promise<ThreadDto> {
    const app = await this.apps.require(appId);
    return toThreadDto(await this.insertThread(this.em, app.id, input));
  }

  /** Creates a thread; a subject-bound widget token stamps its end user on it. */
  async insertThread(
    em: EntityManager,
    appId: string,
    input: { title?: string; metadata?: Record<string, unknown>; sessionId?: string | null },
    id: string = randomUUID(),
  ): Promise<ThreadRow> {
    const metadata = { ...(input.metadata ?? {}) };
    if (this.principal.widgetSubject) metadata.external_user_id = this.principal.widgetSubject;
    const rows = await em.execute<ThreadRow[]>(
      `insert into app_threads (id, workspace_id, app_id, session_id, title, metadata)
       values (?, ?, ?, ?, ?, ?::jsonb) returning *`,
      [
        id,
        this.principal.workspaceId,
        appId,
        input.sessionId ?? null,
        input.title ?? 'New Thread',
        JSON.stringify(metadata),
      ],
    );
    return rows[0] as ThreadRow;
  }

  /** The thread of this app visible to the caller, or 404 `Thread not found`. */
  async findThread(
    em: EntityManager,
    appId: string,
    threadId: string,
    forUpdate = false,
  ): Promise<ThreadRow> {
    if (!isUuid(threadId)) throw threadNotFound();
    const sub = this.subjectFilter();
    const rows = await em.execute<ThreadRow[]>(
      `select * from app_threads where id = ? and workspace_id = ? and app_id = ?${sub.sql}${forUpdate ? ' for update' : ''}`,
      [threadId, this.principal.workspaceId, appId, ...sub.params],
    );
    if (!rows[0]) throw threadNotFound();
    return rows[0];
  }

  async getThread(appId: string, threadId: string): Promise<ThreadDto> {
    const app = await this.apps.require(appId);
    return toThreadDto(await this.findThread(this.em, app.id, threadId));
  }

  async updateThread(
    appId: string,
    threadId: string,
    input: { title?: string; status?: ThreadDto['status'] },
  ): Promise<ThreadDto> {
    const app = await this.apps.require(appId);
    const thread = await this.findThread(this.em, app.id, threadId);
    if (input.title === undefined && input.status === undefined) return toThreadDto(thread);
    const rows = await this.em.execute<ThreadRow[]>(
      `update app_threads set title = coalesce(?, title), status = coalesce(?, status), updated_at = now()
        where id = ? returning *`,
      [input.title ?? null, input.status ?? null, thread.id],
    );
    return toThreadDto(rows[0] as ThreadRow);
  }

  /** Spec 3: a deleted thread is archived, never removed. */
  async archiveThread(appId: string, threadId: string): Promise<{ success: true; threadId: string }> {
    const app = await this.apps.require(appId);
    const thread = await this.findThread(this.em, app.id, threadId);
    await this.em.execute(`update app_threads set status = 'archived', updated_at = now() where id = ?`, [
      thread.id,
    ]);
    return { success: true, threadId: thread.id };
  }

  async listMessages(appId: string, threadId: string, q: { limit?: number; offset?: number }) {
    const app = await this.apps.require(appId);
    const thread = await this.findThread(this.em, app.id, threadId);
    const { limit, offset } = clampPage(q.limit, q.offset, MESSAGE_PAGE);
    const rows = await this.em.execute<MessageRow[]>(
      `select * from app_thread_messages where thread_id = ? and workspace_id = ?
        order by sequence_number asc limit ? offset ?`,
      [thread.id, this.principal.workspaceId, limit, offset],
    );
    const total = await this.em.execute<{ n: string }[]>(
      'select count(*) as n from app_thread_messages where thread_id = ? and workspace_id = ?',
      [thread.id, this.principal.workspaceId],
    );
    return { data: rows.map(toMessageDto), meta: { limit, offset, total: Number(total[0]?.n ?? 0) } };
  }

  /** Writes history without a model call (spec 4.7), in order, in one transaction. */
  async saveMessages(input: SaveMessagesInput): Promise<{ saved: number; threadId: string }> {
    const app = await this.apps.require(input.appId);
    return this.em.transactional(async (tx) => {
      const thread = await this.findThread(tx, app.id, input.threadId);
      await appendMessages(
        tx,
        { id: thread.id, workspaceId: this.principal.workspaceId, appId: app.id },
        input.messages.map((m) => ({
          role: m.role,
          content: m.content,
          requestId: m.requestId ?? null,
          turnId: m.turnId ?? null,
          providerStatus: 'saved',
          metadata: m.metadata ?? {},
        })),
      );
      return { saved: input.messages.length, threadId: thread.id };
    });
  }

  async status(appId: string) {
    const app = await this.apps.require(appId);
    const sub = this.subjectFilter('t.');
    const rows = await this.em.execute<{ threads: string; active: string; messages: string }[]>(
      `select count(*) as threads,
              count(*) filter (where t.status = 'active') as active,
              coalesce(sum(t.message_count), 0) as messages
         from app_threads t where t.workspace_id = ? and t.app_id = ?${sub.sql}`,
      [this.principal.workspaceId, app.id, ...sub.params],
    );
    const r = rows[0];
    return {
      appId: app.id,
      threadCount: Number(r?.threads ?? 0),
      activeThreadCount: Number(r?.active ?? 0),
      messageCount: Number(r?.messages ?? 0),
    };
  }
}
