import { ACTIVE_API_KEY_WHERE, API_KEY_FROM, TOUCH_API_KEY_CTE } from '../../auth/api-keys.js';
import { BoundedMap } from '../../bounded-map.js';
import { rateLimitCte } from '../../metering/rate-limit.js';
import type { StatementHold } from '../../metering/types.js';
import { DEFAULT_MAX_CONTEXT_MESSAGES, HISTORY_ITEM_LIMIT } from './chat-prompt.js';
import type { AppRow, ThreadRow } from './service.js';

export interface AdmissionRow {
  key_id: string | null;
  key_name: string | null;
  workspace_id: string;
  workspace_name: string | null;
  app: AppRow | null;
  thread: ThreadRow | null;
  history: { role: string; content: string }[] | null;
  hits: number | null;
  reset_in: string | number | null;
  /** The credit hold (admissions that try one): `held` is null when the balance did not cover it. */
  hold_tried?: boolean | string | null;
  held?: string | number | null;
}

/**
 * The admission of an app chat turn as ONE statement: the key (when the caller sends one;
 * `last_used_at` refreshed at most once a minute), the app, the thread and its recent
 * messages (as many as `maxContextMessages`: the request's, else the app's, else 20), a unit
 * of the workspace's `app_chat` rate limit, taken only for a valid request to an app that
 * exists (`admit`), and (`hold`) the turn's credit hold: taken only for a request that passes
 * every check before it (valid, app found, its model, system prompt and `maxTokens` those the
 * hold was sized for, within the rate limit, thread found), its amount computed in SQL from
 * the prompt's characters (the thread's history is only known here). `synchronous_commit` is
 * off for it: nothing of it is visible outside before it commits, and the end of the turn
 * (synchronous) flushes it with itself; a crash of the database in between loses the whole
 * turn's admission, hold included, never part of it.
 */
function admissionSql(byKey: boolean, subject: boolean, hold: string | undefined, sharded: boolean): string {
  const k = byKey
    ? `k as (
         select k.id, k.name, k.workspace_id, w.name as workspace_name
           from ${API_KEY_FROM} cross join async_commit
          where ${ACTIVE_API_KEY_WHERE}
       ), ${TOUCH_API_KEY_CTE}`
    : `k as (select ?::uuid as id, null::text as name, ?::uuid as workspace_id, null::text as workspace_name
               from async_commit)`;
  const holdCtes = hold
    ? `, hold_src as (
       select k.workspace_id,
              (select coalesce(sum(least(length(h.content), ${HISTORY_ITEM_LIMIT})
                                   + (length(h.content) > ${HISTORY_ITEM_LIMIT})::int), 0) from h)::bigint as extra_chars,
              jsonb_build_object('workspaceId', k.workspace_id, 'apiKeyId', k.id,
                                 'sessionId', coalesce(t.session_id, ?::text)) as usage_patch
         from k cross join a left join t on true
        where a.model_id is not distinct from ?::text and a.system_prompt is not distinct from ?::text
          and (a.config -> 'controls' -> 'maxTokens') is not distinct from ?::jsonb
          and (not ?::boolean or (select hits from rl) <= ?::int)
          and (not ?::boolean or t.id is not null)
     ), ${hold}`
    : '';
  return `with async_commit as (select set_config('synchronous_commit', 'off', true) as v), ${k}, a as (
       select a.* from apps a join k on a.workspace_id = k.workspace_id
        where a.id = ?::uuid and a.app_type = 'app'
     ), t as (
       select t.* from app_threads t join a on t.app_id = a.id and t.workspace_id = a.workspace_id
        where t.id = ?::uuid${subject ? ` and t.metadata ->> 'external_user_id' = ?` : ''}
     ), h as (
       select m.role, m.content, m.sequence_number from app_thread_messages m join t on m.thread_id = t.id
        where m.provider_status not in ('error', 'aborted', 'pending')
        order by m.sequence_number desc
        limit (select coalesce(?::int,
                 case when jsonb_typeof(a.config -> 'controls' -> 'maxContextMessages') = 'number'
                      then (a.config -> 'controls' ->> 'maxContextMessages')::numeric::int end,
                 ${DEFAULT_MAX_CONTEXT_MESSAGES}) from a)
     ), ${rateLimitCte('?::boolean and exists (select 1 from a)', sharded)}${holdCtes}
     select k.id as key_id, k.name as key_name, k.workspace_id, k.workspace_name,
            (select row_to_json(a) from a) as app, (select row_to_json(t) from t) as thread,
            (select json_agg(json_build_object('role', h.role, 'content', h.content) order by h.sequence_number)
               from h) as history,
            rl.hits, rl.reset_in${hold ? `, exists (select 1 from hold_amt) as hold_tried, (select held from hold_upd) as held` : ''}
       from k left join rl on true`;
}

const ADMISSION_SQL = new Map<string, string>();
export const admission = (
  byKey: boolean,
  subject: boolean,
  hold: StatementHold | undefined,
  sharded: boolean,
) => {
  // The hold's CTEs are one constant text (metering's).
  const key = `${byKey}:${subject}:${!!hold}:${sharded}`;
  let sql = ADMISSION_SQL.get(key);
  if (!sql) {
    sql = admissionSql(byKey, subject, hold?.ctes, sharded);
    ADMISSION_SQL.set(key, sql);
  }
  return sql;
};

/**
 * What sized the last hold of an app in this process: its model, system prompt and
 * `controls.maxTokens`. The next turn of the app sizes its hold from them before its admission
 * and the admission takes it only if the app still has exactly those (else the hold is its
 * own statement, as for an app not seen yet): nothing to invalidate, whoever edits the app.
 */
export const HOLD_GUESSES = new BoundedMap<string, AppRow>(10_000);
/** `config.controls.maxTokens` as the admission compares it (`->` of the jsonb): JSON, or null when absent. */
export const maxTokensJson = (app: AppRow): string | null => {
  const controls = app.config?.controls as Record<string, unknown> | undefined;
  const v = controls && typeof controls === 'object' ? controls.maxTokens : undefined;
  return v === undefined ? null : JSON.stringify(v);
};

export const truthy = (v: unknown) => v === true || v === 't' || v === 'true';
