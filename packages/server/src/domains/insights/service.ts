import type { EntityManager } from '@mikro-orm/postgresql';
import { appError } from '../../errors/index.js';
import type { UsageComponentLine } from '../../metering/types.js';
import { clampPage, isUuid, THREAD_PAGE } from '../apps/service.js';
import type { ConversationDetail, ConversationSummary } from './schema.js';

/** Message content in a conversation's detail is cut here (spec 8), then marked with `…`. */
export const CONTENT_LIMIT = 4000;
/** The detail's `usage_events`: the most recent ones only (spec 8). */
export const USAGE_EVENTS_LIMIT = 200;

const iso = (d: Date | string | null) => (d == null ? null : new Date(d).toISOString());
const usd = (micros: number | string | null | undefined) => Number(micros ?? 0) / 1_000_000;

export interface ConversationFilter {
  limit?: number;
  offset?: number;
  from?: string;
  to?: string;
  appIds?: string[];
  userKey?: string;
  status?: 'active' | 'archived' | 'closed';
}

const DATE_ONLY = /^\d{4}-\d{2}-\d{2}$/;
const HAS_ZONE = /([Zz]|[+-]\d{2}:?\d{2})$/;

/**
 * A filter bound as an instant. Without a zone a time is UTC (never the server's local time);
 * a bare date is its midnight UTC, and as an upper bound (`to`) it covers that whole day: the
 * bound is then the next midnight, exclusive.
 */
export function boundInstant(s: string, bound: 'from' | 'to'): { at: string; exclusive: boolean } {
  if (DATE_ONLY.test(s)) {
    const midnight = new Date(`${s}T00:00:00Z`).getTime();
    return bound === 'to'
      ? { at: new Date(midnight + 86_400_000).toISOString(), exclusive: true }
      : { at: new Date(midnight).toISOString(), exclusive: false };
  }
  return { at: new Date(HAS_ZONE.test(s) ? s : `${s.replace(' ', 'T')}Z`).toISOString(), exclusive: false };
}

/** `app_id` (repeatable) and `app_ids` (comma-separated) as one list, blanks dropped. */
export function appIdsOf(
  appId: string | string[] | undefined,
  appIds: string | undefined,
): string[] | undefined {
  const all = [...(Array.isArray(appId) ? appId : appId ? [appId] : []), ...(appIds?.split(',') ?? [])]
    .map((s) => s.trim())
    .filter(Boolean);
  return all.length > 0 ? [...new Set(all)] : undefined;
}

interface ThreadRow {
  id: string;
  workspace_id: string;
  app_id: string;
  app_name: string | null;
  session_id: string | null;
  title: string | null;
  status: ConversationSummary['status'];
  message_count: number | null;
  metadata: Record<string, unknown> | null;
  created_at: Date | null;
  updated_at: Date | null;
  user_key: string | null;
  cost_micros: string | null;
  input_tokens: string | null;
  output_tokens: string | null;
  request_count: string | null;
}

interface UsageRow {
  id: string;
  request_id: string;
  cost_micros: string;
  input_tokens: string;
  output_tokens: string;
  created_at: Date;
  endpoint: string;
  model: string;
  provider_status: string;
  component_lines: UsageComponentLine[] | string | null;
}

const threadFields = (r: ThreadRow) => ({
  id: r.id,
  workspace_id: r.workspace_id,
  app_id: r.app_id,
  session_id: r.session_id,
  title: r.title,
  status: r.status,
  message_count: r.message_count == null ? null : Number(r.message_count),
  created_at: iso(r.created_at),
  updated_at: iso(r.updated_at),
  metadata: r.metadata ?? {},
});

const lines = (raw: UsageRow['component_lines']): UsageComponentLine[] => {
  const v = typeof raw === 'string' ? (JSON.parse(raw) as unknown) : raw;
  return Array.isArray(v) ? (v as UsageComponentLine[]) : [];
};

const lineDto = (l: UsageComponentLine) => ({
  component: String(l.component),
  quantity: Number(l.quantity ?? 0),
  unit_price_usd: usd(l.unitPriceMicros),
  cost_usd: usd(l.costMicros),
});

/**
 * The end user of a thread (spec 2.10 `user_key`): its `external_user_id`, else its
 * `anonymous_visitor_id`, else its session id. The `user_key` filter matches any of the three.
 */
const USER_KEY = `coalesce(nullif(t.metadata ->> 'external_user_id', ''),
  nullif(t.metadata ->> 'anonymous_visitor_id', ''), t.session_id)`;

/** Usage of a thread: its usage records (app chat writes one per model call). */
const USAGE_OF_THREAD = `left join lateral (
    select sum(u.cost_micros) as cost_micros, sum(u.input_tokens) as input_tokens,
           sum(u.output_tokens) as output_tokens, count(*) as request_count
      from usage_records u where u.workspace_id = t.workspace_id and u.thread_id = t.id::text
  ) us on true`;

/**
 * Insights (spec 4.11, 2.10): read-only analytics over the workspace's app conversations
 * (app memory threads), with the usage and cost their model calls recorded. Every query is
 * scoped to one workspace; a thread of another workspace does not exist here.
 */
export class InsightsService {
  constructor(
    private readonly em: EntityManager,
    private readonly workspaceId: string,
  ) {}

  async list(
    f: ConversationFilter,
  ): Promise<{ data: ConversationSummary[]; meta: { limit: number; offset: number; total: number } }> {
    const { limit, offset } = clampPage(f.limit, f.offset, THREAD_PAGE);
    const where: string[] = ['t.workspace_id = ?'];
    const params: unknown[] = [this.workspaceId];
    // Activity time: updated_at (spec 4.11: "or created_at when updated_at is null"; here it
    // is never null, set at creation), which app_threads_ws_activity_idx orders.
    if (f.from) {
      where.push('t.updated_at >= ?::timestamptz');
      params.push(boundInstant(f.from, 'from').at);
    }
    if (f.to) {
      const to = boundInstant(f.to, 'to');
      where.push(`t.updated_at ${to.exclusive ? '<' : '<='} ?::timestamptz`);
      params.push(to.at);
    }
    if (f.appIds) {
      // As one JSON array: the driver would spread a JS array into a list of placeholders.
      where.push('t.app_id::text in (select jsonb_array_elements_text(?::jsonb))');
      params.push(JSON.stringify(f.appIds));
    }
    if (f.userKey !== undefined) {
      where.push(
        `(t.metadata ->> 'external_user_id' = ? or t.metadata ->> 'anonymous_visitor_id' = ? or t.session_id = ?)`,
      );
      params.push(f.userKey, f.userKey, f.userKey);
    }
    if (f.status) {
      where.push('t.status = ?');
      params.push(f.status);
    }
    const cond = where.join(' and ');
    const rows = await this.em.execute<ThreadRow[]>(
      `select t.*, a.name as app_name, ${USER_KEY} as user_key, us.*
         from app_threads t
         left join apps a on a.id = t.app_id
         ${USAGE_OF_THREAD}
        where ${cond}
        order by t.updated_at desc, t.id
        limit ? offset ?`,
      [...params, limit, offset],
    );
    const total = await this.em.execute<{ n: string }[]>(
      `select count(*) as n from app_threads t where ${cond}`,
      params,
    );
    return {
      data: rows.map((r) => ({
        ...threadFields(r),
        app_name: r.app_name,
        user_key: r.user_key,
        usage_summary: {
          totalCostUsd: usd(r.cost_micros),
          inputTokens: Number(r.input_tokens ?? 0),
          outputTokens: Number(r.output_tokens ?? 0),
          requestCount: Number(r.request_count ?? 0),
        },
      })),
      meta: { limit, offset, total: Number(total[0]?.n ?? 0) },
    };
  }

  /**
   * One conversation: its messages in order (content cut at 4000 characters), every usage
   * record of the thread (oldest first) and the 200 most recent usage events, an event being
   * one component line of a record (input tokens, output tokens, an image…), newest first.
   */
  async get(threadId: string): Promise<ConversationDetail> {
    if (!isUuid(threadId)) throw appError('CONVERSATION_NOT_FOUND');
    const threads = await this.em.execute<ThreadRow[]>(
      'select t.* from app_threads t where t.id = ? and t.workspace_id = ?',
      [threadId, this.workspaceId],
    );
    const thread = threads[0];
    if (!thread) throw appError('CONVERSATION_NOT_FOUND');
    const messages = await this.em.execute<
      {
        id: string;
        role: 'user' | 'assistant' | 'system';
        content: string;
        sequence_number: number;
        created_at: Date;
        provider_status: string;
        error_code: string | null;
      }[]
    >(
      `select id, role, provider_status, error_code, sequence_number, created_at,
                case when char_length(content) > ${CONTENT_LIMIT}
                     then left(content, ${CONTENT_LIMIT}) || '…' else content end as content
           from app_thread_messages where thread_id = ? and workspace_id = ?
          order by sequence_number`,
      [threadId, this.workspaceId],
    );
    const usage = await this.em.execute<UsageRow[]>(
      `select id, request_id, cost_micros, input_tokens, output_tokens, created_at, endpoint, model,
                provider_status, component_lines
           from usage_records where thread_id = ? and workspace_id = ?
          order by created_at, id`,
      [threadId, this.workspaceId],
    );
    const records = usage.map((u) => ({
      id: u.id,
      request_id: u.request_id,
      cost_usd: usd(u.cost_micros),
      input_tokens: Number(u.input_tokens),
      output_tokens: Number(u.output_tokens),
      usage_timestamp: iso(u.created_at) as string,
      endpoint: u.endpoint,
      model: u.model,
      provider_status: u.provider_status,
      component_lines: lines(u.component_lines).map(lineDto),
    }));
    const events = [];
    for (let i = records.length - 1; i >= 0 && events.length < USAGE_EVENTS_LIMIT; i--) {
      const r = records[i] as (typeof records)[number];
      for (const [n, l] of r.component_lines.entries()) {
        if (events.length >= USAGE_EVENTS_LIMIT) break;
        events.push({
          id: `${r.id}:${n}`,
          usage_record_id: r.id,
          request_id: r.request_id,
          ...l,
          endpoint: r.endpoint,
          model: r.model,
          provider_status: r.provider_status,
          usage_timestamp: r.usage_timestamp,
        });
      }
    }
    return {
      ...threadFields(thread),
      messages: messages.map((m) => ({
        id: m.id,
        role: m.role,
        content: m.content,
        sequence_number: Number(m.sequence_number),
        created_at: iso(m.created_at) as string,
        provider_status: m.provider_status,
        error_code: m.error_code,
      })),
      usage_records: records,
      usage_events: events,
    };
  }
}
