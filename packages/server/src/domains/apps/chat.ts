import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { ACTIVE_API_KEY_WHERE, API_KEY_FROM, hashApiKey, TOUCH_API_KEY_CTE } from '../../auth/api-keys.js';
import { apiKeyPrincipal, type Principal } from '../../auth/principal.js';
import { BoundedMap } from '../../bounded-map.js';
import type { SqlExecutor } from '../../db/sql.js';
import { AppError, appError } from '../../errors/index.js';
import { insufficientCredits } from '../../metering/credits.js';
import {
  rateLimitCte,
  rateLimitCteParams,
  rateLimitHeaders,
  shardedRateLimit,
} from '../../metering/rate-limit.js';
import type { GenerationMeter, Metering, StatementHold } from '../../metering/types.js';
import type { LlmMessage, LlmProvider, LlmUsage, ModelCatalog, ModelInfo } from '../../providers/llm.js';
import type { ChatMessageInput, ChatResponse, ChatStreamEvent } from './schema.js';
import { type AppRow, appControls, appNotFound, isUuid, type ThreadRow, threadNotFound } from './service.js';

/**
 * What app chat needs beyond the request. Its statements run on the plain pool (`db/sql.ts`)
 * with the pool's metering (usage records batched), off the ORM: this is a hot path.
 */
export interface ChatDeps {
  llm: LlmProvider;
  models: ModelCatalog;
  metering: Metering;
  db: SqlExecutor;
  log: Logger;
}

/** The pool-backed `ChatDeps` of a server. */
export const appChatDeps = (deps: {
  llm: LlmProvider;
  models: ModelCatalog;
  poolMetering: Metering;
  db: { sql: SqlExecutor };
  log: Logger;
}): ChatDeps => ({
  llm: deps.llm,
  models: deps.models,
  metering: deps.poolMetering,
  db: deps.db.sql,
  log: deps.log,
});

export const DEFAULT_SYSTEM_PROMPT = 'You are a helpful assistant.';
export const DEFAULT_MAX_CONTEXT_MESSAGES = 20;
const CONTEXT_JSON_LIMIT = 4000;
const HISTORY_ITEM_LIMIT = 8000;

/** A turn admitted and its credits held, its prompt built; the model is not called yet. */
export interface PreparedTurn {
  principal: Principal;
  app: AppRow;
  model: ModelInfo;
  /** The thread's id: an existing one, or the one the turn creates when it ends. */
  threadId: string;
  /** Merged into the thread's metadata (`external_user_id`, …). */
  identity: Record<string, string>;
  sessionId: string | null;
  turnId: string;
  message: string;
  callerRole: string;
  messages: LlmMessage[];
  temperature?: number;
  maxTokens?: number;
  endpoint: string;
  meter: GenerationMeter;
  /** Rate-limit headers for the successful response. */
  headers: Record<string, string>;
}

/** An error event with the failure behind it (the sync endpoint rethrows it). */
export type ChatRunEvent = ChatStreamEvent & { cause?: AppError };

const truncate = (s: string, n: number) => (s.length > n ? `${s.slice(0, n)}…` : s);

function contextBlock(label: string, value: Record<string, unknown> | undefined): string | undefined {
  if (!value || Object.keys(value).length === 0) return undefined;
  return `${label}:\n${truncate(JSON.stringify(value), CONTEXT_JSON_LIMIT)}`;
}

/** The prompt: app prompt and contexts, seeded history, the thread's recent messages, the message. */
export function buildPrompt(
  app: AppRow,
  input: ChatMessageInput,
  threadHistory: { role: string; content: string }[],
): LlmMessage[] {
  const system = [
    app.system_prompt?.trim() || DEFAULT_SYSTEM_PROMPT,
    `The person writing has the role: ${input.role}.`,
    contextBlock('Lesson context', input.lessonContext),
    contextBlock('Session context', input.sessionContext),
    contextBlock('Page context', input.pageContext),
  ]
    .filter(Boolean)
    .join('\n\n');
  const out: LlmMessage[] = [{ role: 'system', content: system }];
  // Callers cannot inject system instructions through history: anything not `assistant` is `user`.
  const asTurn = (m: { role: string; content: string }): LlmMessage =>
    m.role === 'assistant'
      ? { role: 'assistant', content: truncate(m.content, HISTORY_ITEM_LIMIT) }
      : { role: 'user', content: truncate(m.content, HISTORY_ITEM_LIMIT) };
  for (const m of input.chatHistory ?? []) out.push(asTurn(m));
  for (const m of threadHistory) out.push(asTurn(m));
  out.push({ role: 'user', content: input.message });
  return out;
}

const newTurnId = () => `turn_${randomUUID().replaceAll('-', '')}`;

/** Who is calling: an API key not resolved yet (resolved by the admission statement), or a principal. */
export type AppChatCaller = { apiKey: string } | { principal: Principal };

interface AdmissionRow {
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
const admission = (byKey: boolean, subject: boolean, hold: StatementHold | undefined, sharded: boolean) => {
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
const HOLD_GUESSES = new BoundedMap<string, AppRow>(10_000);
/** `config.controls.maxTokens` as the admission compares it (`->` of the jsonb): JSON, or null when absent. */
const maxTokensJson = (app: AppRow): string | null => {
  const controls = app.config?.controls as Record<string, unknown> | undefined;
  const v = controls && typeof controls === 'object' ? controls.maxTokens : undefined;
  return v === undefined ? null : JSON.stringify(v);
};

const truthy = (v: unknown) => v === true || v === 't' || v === 'true';

/**
 * A turn's memory, after the model answered (or failed): the thread (created for a new
 * conversation, else its identity metadata and session merged in), its counter bumped, and
 * the user message and the reply (when there is one) numbered after it. `from`: what the
 * thread's upsert selects from (the settlement's `stl_done`, one row once the balance row is
 * written, so the workspace is locked before the thread, or nothing).
 */
const saveTurnCtes = (from: string) => `th as (
    insert into app_threads as t (id, workspace_id, app_id, session_id, metadata, message_count)
    select ?::uuid, ?::uuid, ?::uuid, ?, ?::jsonb, ?::int${from}
    on conflict (id) do update set
      metadata = t.metadata || excluded.metadata,
      session_id = coalesce(t.session_id, excluded.session_id),
      message_count = t.message_count + excluded.message_count,
      updated_at = now()
    returning id, workspace_id, app_id, message_count
  ), ins as (
    insert into app_thread_messages
      (id, workspace_id, app_id, thread_id, role, content, sequence_number, request_id, turn_id,
       provider_status, error_code, latency_ms, input_tokens, output_tokens, cost_micros, metadata)
    select gen_random_uuid(), th.workspace_id, th.app_id, th.id, m.role, m.content,
           th.message_count - ?::int + m.ord, ?, ?, m.provider_status, m.error_code, m.latency_ms,
           m.input_tokens, m.output_tokens, m.cost_micros, m.metadata
      from th, jsonb_to_recordset(?::jsonb) as m(ord int, role text, content text, provider_status text,
           error_code text, latency_ms int, input_tokens int, output_tokens int, cost_micros bigint,
           metadata jsonb)
  )`;

/** The memory alone (a meter that cannot settle in the statement). */
const SAVE_TURN_SQL = `with ${saveTurnCtes('')} select id from th`;

/**
 * The settlement's CTEs (first: they write the workspace's balance row), then the memory, whose
 * thread upsert selects from `stl_done`, after that row. One text per settlement text (a constant)
 * and commit mode: `asyncCommit` commits with `synchronous_commit` off, so the workspace's
 * balance row is released at commit instead of after the WAL flush (the caller then waits for
 * the database's `durable()` before it answers; decision 0032).
 */
const END_TURN = new Map<string, string>();
const END_TURN_SQL = (settlement: string, columns: string, asyncCommit: boolean) => {
  const key = `${asyncCommit}:${settlement}`;
  let sql = END_TURN.get(key);
  if (!sql) {
    sql = asyncCommit
      ? `with end_async as (select set_config('synchronous_commit', 'off', true) as v), ${settlement}, ${saveTurnCtes(' from stl_done')} select ${columns}, (select id from th) as thread_id, (select v from end_async) as end_async`
      : `with ${settlement}, ${saveTurnCtes(' from stl_done')} select ${columns}, (select id from th) as thread_id`;
    END_TURN.set(key, sql);
  }
  return sql;
};

/** Characters of a prompt, as `estimateUsage` counts them. */
const promptChars = (messages: LlmMessage[]) => messages.reduce((n, m) => n + (m.content?.length ?? 0), 0);

/** App chat (spec 4.6 / 6.2): one turn = user message stored, model streamed, reply stored, credits debited. */
export class AppChatService {
  constructor(
    private readonly deps: ChatDeps,
    private readonly requestId: string,
  ) {}

  /**
   * Everything that can fail before the model is called, as plain errors (so a stream answers
   * with a JSON error status, not an event), in ONE statement: the admission (key, app, thread
   * and history, rate limit) with the credit hold (sized from what the app had at its last
   * turn in this process, checked by the statement; the first turn of an app in a process, or
   * after the app's model, system prompt or `maxTokens` changed, takes the hold in a second
   * statement). In order: 401 (key), the body's 400 (`invalid`), 401 `Unauthorized or app not
   * found`, the model's 400/503, 429, 404 `Thread not found`, 402 `Insufficient credits`
   * (nothing held or written). Nothing is stored yet: the thread and the messages are written
   * with the settlement in one statement when the turn ends (`run`).
   */
  async prepare(
    caller: AppChatCaller,
    appId: string,
    input: ChatMessageInput | undefined,
    endpoint: string,
    invalid?: AppError,
    onPrincipal?: (principal: Principal) => void,
  ): Promise<PreparedTurn> {
    const given = 'principal' in caller ? caller.principal : undefined;
    const subject = given?.widgetSubject;
    const rule = this.deps.metering.settings.rateLimits.app_chat;
    const limited = !invalid && !!rule && rule.limit > 0;
    const w = rule?.windowSeconds ?? 60;
    const scopedOut = !isUuid(appId) || (given?.appId !== undefined && given.appId !== appId);
    const threadParam = input?.threadId !== undefined && isUuid(input.threadId) ? input.threadId : null;
    const newThreadId = randomUUID();
    // The hold, sized before the statement from what the app had last time.
    const guess = !invalid && input && !scopedOut ? HOLD_GUESSES.get(appId) : undefined;
    let hold: StatementHold | undefined;
    let guessed: ModelInfo | undefined;
    if (guess && input) {
      try {
        guessed = this.deps.models.resolve('chat', guess.model_id);
      } catch {
        guessed = undefined;
      }
      if (guessed) {
        hold = this.deps.metering.holdInStatement(
          {
            appId,
            threadId: threadParam ?? newThreadId,
            requestId: this.requestId,
            endpoint,
            model: guessed,
            meter: 'credits',
          },
          {
            inputChars: promptChars(buildPrompt(guess, input, [])),
            maxTokens: { ...appControls(guess), ...(input.controls ?? {}) }.maxTokens,
          },
        );
      }
    }
    const sharded = shardedRateLimit(limited, rule?.limit ?? 0);
    const rows = await this.deps.db.execute<AdmissionRow[]>(admission(!given, !!subject, hold, sharded), [
      ...('apiKey' in caller
        ? [hashApiKey(caller.apiKey)]
        : [(given as Principal).keyId ?? null, (given as Principal).workspaceId]),
      scopedOut ? null : appId,
      threadParam,
      ...(subject ? [subject] : []),
      input?.controls?.maxContextMessages ?? null,
      ...rateLimitCteParams('app_chat:', w, sharded, [limited]),
      ...(hold && guess
        ? [
            input?.sessionId ?? null,
            guess.model_id,
            guess.system_prompt,
            maxTokensJson(guess),
            limited,
            rule?.limit ?? 0,
            input?.threadId !== undefined,
            ...hold.params,
          ]
        : []),
    ]);
    const row = rows[0];
    if (!row) throw appError('INVALID_API_KEY');
    const principal =
      given ??
      apiKeyPrincipal({
        id: row.key_id as string,
        name: row.key_name,
        workspace_id: row.workspace_id,
        workspace_name: row.workspace_name ?? '',
      });
    const thread0 = row.thread;
    const meterInput = (model: ModelInfo, app: AppRow) => ({
      workspaceId: principal.workspaceId,
      apiKeyId: principal.keyId ?? null,
      appId: app.id,
      threadId: thread0?.id ?? newThreadId,
      sessionId: thread0?.session_id ?? input?.sessionId ?? null,
      requestId: this.requestId,
      endpoint,
      model,
      meter: 'credits' as const,
      insufficientVariant: 'appsChat' as const,
    });
    // The hold the statement took (it did only when every check below passes).
    const tried = hold !== undefined && truthy(row.hold_tried);
    const held = tried && row.held !== null && row.held !== undefined ? Number(row.held) : undefined;
    let meter: GenerationMeter | undefined;
    try {
      onPrincipal?.(principal);
      if (invalid || !input) throw invalid ?? appError('INVALID_REQUEST_BODY');
      const app = row.app;
      if (!app) throw appNotFound();
      // What the app's next turn sizes its hold from (whatever this turn's outcome).
      if (!tried) HOLD_GUESSES.set(app.id, app);
      const model = this.deps.models.resolve('chat', app.model_id);
      const headers =
        limited && rule ? rateLimitHeaders(rule, Number(row.hits), Number(row.reset_in), 'app_chat') : {};
      if (input.threadId !== undefined && !thread0) throw threadNotFound();
      const controls = { ...appControls(app), ...(input.controls ?? {}) };
      const messages = buildPrompt(app, input, row.history ?? []);
      const inputTokens = estimateUsage(messages, '').inputTokens;
      if (held !== undefined && hold) {
        meter = hold.adopt(meterInput(model, app), held, inputTokens);
      } else if (tried) {
        throw insufficientCredits('appsChat');
      } else {
        // 402 `Insufficient credits` up front, holding the prompt's cost and the expected
        // reply (capped by maxTokens); topped up while a longer reply streams.
        meter = await this.deps.metering.startGeneration(meterInput(model, app), {
          inputTokens,
          maxTokens: controls.maxTokens,
        });
      }
      return {
        principal,
        app,
        model,
        threadId: thread0?.id ?? newThreadId,
        identity: identityMetadata(input, principal),
        sessionId: input.sessionId ?? null,
        turnId: newTurnId(),
        message: input.message,
        callerRole: input.role,
        messages,
        temperature: controls.temperature,
        maxTokens: controls.maxTokens,
        endpoint,
        meter,
        headers,
      };
    } catch (err) {
      // Not reached with a hold taken (it is taken only when every check passes); if it is,
      // the hold goes back whole.
      if (held !== undefined && hold && guessed && !meter) {
        await hold
          .adopt(meterInput(guessed, { id: appId } as AppRow), held, 0)
          .release()
          .catch((e) => this.deps.log.error({ err: e }, 'app chat: could not release a hold'));
      }
      throw err;
    }
  }

  /**
   * Calls the model and yields the spec's stream events. Always ends with `done` or `error`;
   * on failure the user message is stored marked `error` (or `aborted` when the caller left).
   */
  async *run(turn: PreparedTurn, signal?: AbortSignal): AsyncGenerator<ChatRunEvent> {
    try {
      yield* this.runTurn(turn, signal);
    } finally {
      // A consumer that stops early still settles the hold (a no-op once the turn finished it).
      await turn.meter.finish('aborted').catch(() => {});
    }
  }

  private async *runTurn(turn: PreparedTurn, signal?: AbortSignal): AsyncGenerator<ChatRunEvent> {
    const started = Date.now();
    let text = '';
    let usage: LlmUsage | undefined;
    try {
      for await (const part of this.deps.llm.stream({
        model: turn.model,
        messages: turn.messages,
        temperature: turn.temperature,
        maxTokens: turn.maxTokens,
        signal,
      })) {
        if (part.type === 'text' && part.text) {
          text += part.text;
          yield { type: 'token', content: part.text };
          if (turn.meter.addStreamedChars(part.text.length)) await turn.meter.check();
        } else if (part.type === 'usage') {
          usage = part.usage;
        }
      }
    } catch (err) {
      const aborted = signal?.aborted === true;
      const appErr = err instanceof AppError ? err : appError('MODEL_ERROR');
      const code = appErr.code === 'INSUFFICIENT_CREDITS' ? 'INSUFFICIENT_CREDITS' : 'MODEL_ERROR';
      await this.fail(turn, aborted ? 'aborted' : 'error', code, Date.now() - started).catch((e) =>
        this.deps.log.error({ err: e }, 'app chat: could not store the failed turn'),
      );
      if (!aborted) this.deps.log.warn({ err, turnId: turn.turnId }, 'app chat: model call failed');
      yield { type: 'error', code, message: appErr.message, cause: appErr };
      return;
    }
    const latencyMs = Date.now() - started;
    const tokens = usage ?? estimateUsage(turn.messages, text);
    turn.meter.addUsage(tokens);
    const done = await this.succeed(turn, text, tokens, latencyMs);
    yield done;
  }

  /** The non-streaming endpoint: the same turn, collected. */
  async complete(
    principal: Principal,
    input: ChatMessageInput,
    endpoint: string,
    headersOut: Record<string, string> = {},
  ): Promise<ChatResponse> {
    const turn = await this.prepare({ principal }, input.appId, input, endpoint);
    Object.assign(headersOut, turn.headers);
    let content = '';
    for await (const ev of this.run(turn)) {
      if (ev.type === 'token') content += ev.content;
      else if (ev.type === 'error') throw ev.cause ?? appError('MODEL_ERROR');
      else if (ev.type === 'done') {
        return {
          threadId: ev.threadId,
          turnId: ev.turnId,
          content,
          role: 'assistant',
          metadata: ev.metadata,
          contextWindow: ev.contextWindow,
        };
      }
    }
    throw appError('MODEL_ERROR');
  }

  /**
   * The end of a turn in ONE statement (one transaction): the settlement of the hold with its
   * usage record (`settlementInStatement`) and the memory (`saveTurnCtes`: the thread and the
   * turn's messages), on disk before `done`/`error` is sent (on the server: committed without
   * the flush, then a shared barrier; decision 0032). If it fails,
   * neither is written: the hold is then settled on its own (`finish`) and the error goes on.
   * A meter that cannot settle in a statement writes the memory and settles side by side.
   */
  private async end(
    turn: PreparedTurn,
    messages: TurnMessage[],
    status: 'success' | 'error' | 'aborted',
  ): Promise<void> {
    const rows = messages.map((m, i) => ({
      ord: i + 1,
      role: m.role,
      content: m.content,
      provider_status: m.providerStatus,
      error_code: m.errorCode ?? null,
      latency_ms: Math.max(0, Math.round(m.latencyMs ?? 0)),
      input_tokens: m.inputTokens ?? 0,
      output_tokens: m.outputTokens ?? 0,
      cost_micros: m.costMicros ?? 0,
      metadata: m.metadata,
    }));
    const save = [
      turn.threadId,
      turn.principal.workspaceId,
      turn.app.id,
      turn.sessionId,
      JSON.stringify(turn.identity),
      rows.length,
      rows.length,
      this.requestId,
      turn.turnId,
      JSON.stringify(rows),
    ];
    const stl = turn.meter.settlementInStatement(status);
    if (!stl) {
      await Promise.all([this.deps.db.execute(SAVE_TURN_SQL, save), turn.meter.finish(status)]);
      return;
    }
    // On the PostgreSQL server the statement commits without waiting for the WAL flush (the
    // balance row every turn of the workspace updates is released at once), and the turn waits
    // for a shared flush before its `done` or `error` (decision 0032).
    const durable = this.deps.db.durable;
    let result: { stl_delta: unknown; stl_change: unknown }[];
    try {
      result = await this.deps.db.execute(END_TURN_SQL(stl.ctes, stl.columns, durable !== undefined), [
        ...stl.params,
        ...save,
      ]);
    } catch (err) {
      stl.failed();
      await turn.meter
        .finish(status)
        .catch((e) => this.deps.log.error({ err: e }, 'app chat: could not settle the turn'));
      throw err;
    }
    stl.committed(result[0] ?? { stl_delta: null, stl_change: null });
    // Committed and visible; on disk once a barrier sent after it answered. If none can be
    // confirmed (the database went away), the turn's outcome is unknown to this process, as
    // for a commit whose answer is lost: it ends with an error, not `done`, and is not settled
    // again here (if that commit was lost, its hold row is back and, no longer extended by
    // this process since `settlementInStatement`, is settled by the sweep once its lease ends).
    // Logged once, by the caller: the stream's route, the REST handler (sync), or `fail`'s catch.
    if (durable) await durable();
  }

  private userMessage(turn: PreparedTurn, status: string, extra: Partial<TurnMessage> = {}): TurnMessage {
    return {
      role: 'user',
      content: turn.message,
      providerStatus: status,
      metadata: { callerRole: turn.callerRole },
      ...extra,
    };
  }

  private async succeed(
    turn: PreparedTurn,
    text: string,
    usage: LlmUsage,
    latencyMs: number,
  ): Promise<Extract<ChatStreamEvent, { type: 'done' }>> {
    const costMicros = turn.meter.costMicros();
    await this.end(
      turn,
      [
        this.userMessage(turn, 'success'),
        {
          role: 'assistant',
          content: text,
          providerStatus: 'success',
          latencyMs,
          inputTokens: usage.inputTokens,
          outputTokens: usage.outputTokens,
          costMicros,
          metadata: { model: turn.model.id, ...(usage.estimated ? { usageEstimated: true } : {}) },
        },
      ],
      'success',
    );
    const window = turn.model.contextWindow > 0 ? usage.inputTokens / turn.model.contextWindow : 0;
    return {
      type: 'done',
      threadId: turn.threadId,
      turnId: turn.turnId,
      contextWindow: { utilization: Math.min(1, Math.max(0, window)) },
      metadata: {
        model: turn.model.id,
        tokensUsed: {
          input: usage.inputTokens,
          output: usage.outputTokens,
          total: usage.inputTokens + usage.outputTokens,
        },
        latencyMs,
      },
    };
  }

  private async fail(turn: PreparedTurn, status: 'error' | 'aborted', code: string, latencyMs: number) {
    // Streamed output so far is charged (the upstream produced it); input is unknown.
    await this.end(turn, [this.userMessage(turn, status, { errorCode: code, latencyMs })], status);
  }
}

interface TurnMessage {
  role: 'user' | 'assistant';
  content: string;
  providerStatus: string;
  errorCode?: string;
  latencyMs?: number;
  inputTokens?: number;
  outputTokens?: number;
  costMicros?: number;
  metadata: Record<string, unknown>;
}

/** `external_user_id` / `anonymous_visitor_id` for insights' `user_key`; a subject-bound token wins. */
function identityMetadata(input: ChatMessageInput, principal: Principal): Record<string, string> {
  const out: Record<string, string> = {};
  const ext = input.externalIdentity;
  if (ext?.externalUserId) out.external_user_id = ext.externalUserId;
  if (ext?.anonymousVisitorId) out.anonymous_visitor_id = ext.anonymousVisitorId;
  if (ext?.role) out.external_user_role = ext.role;
  if (principal.widgetSubject) out.external_user_id = principal.widgetSubject;
  return out;
}

/** About 4 characters per token (spec 8), when the upstream reports no usage. */
export function estimateUsage(messages: LlmMessage[], reply: string): LlmUsage {
  const promptChars = messages.reduce((n, m) => n + (m.content?.length ?? 0), 0);
  return {
    inputTokens: Math.ceil(promptChars / 4),
    outputTokens: Math.ceil(reply.length / 4),
    estimated: true,
  };
}
