import type { EntityManager } from '@mikro-orm/postgresql';
import { ACTIVE_API_KEY_WHERE, API_KEY_FROM, TOUCH_API_KEY_CTE } from '../../auth/api-keys.js';
import type { SqlExecutor } from '../../db/sql.js';
import { rateLimitCte, rateLimitCteParams, shardedRateLimit } from '../../metering/rate-limit.js';
import { ms, type Row, toRun } from '../../runs/store.js';
import type { RunRecord } from '../../runs/types.js';
import { currentTraceparent } from '../../telemetry/tracing.js';

export interface TurnAdmission {
  /** The session was not found in the workspace. */
  missing: boolean;
  /** The oldest live turn of the session, when the turn was refused (`reject`). */
  activeRunId: string | null;
  run: RunRecord | null;
  /** The `apps` row of the session's agent. */
  agent: Row | null;
}

/**
 * The CTEs of a turn's admission (`s`, `act`, `ok`, `msg`, `touched`, `run`): session lookup
 * in the workspace `ws` (an expression; its parameters `wsParams` are repeated where it is
 * used), the concurrency check, the user message, the session touched, and the run — leased
 * when `claimFor` is given and no other turn of the session is live.
 */
function turnAdmissionSql(
  ws: string,
  wsParams: unknown[],
  t: {
    runId: string;
    messageId: string;
    sessionId: string;
    message: string;
    input: Record<string, unknown>;
    reject: boolean;
    claimFor: { owner: string; leaseMs: number } | null;
  },
  /** The run's input: `?::jsonb` (the `input` parameter), or an expression around it. */
  inputSql = '?::jsonb',
): { ctes: string; params: unknown[] } {
  const claim = t.claimFor !== null;
  return {
    ctes: `s as (
         select id, app_id from agent_sessions where id = ?::uuid and workspace_id = ${ws}
       ), act as (
         select r.id from runs r join s on r.session_id = s.id
         where r.kind = 'turn' and r.status in ('pending', 'running') order by r.created_at limit 1
       ), ok as (
         select s.id, s.app_id, not exists (select 1 from act) as free from s
         where not ?::boolean or not exists (select 1 from act)
       ), msg as (
         insert into session_messages (id, workspace_id, session_id, run_id, role, content, metadata)
         select ?::uuid, ${ws}, ok.id, ?::uuid, 'user', ?::text, '{}'::jsonb from ok returning id
       ), touched as (
         update agent_sessions set last_message_at = now() where id in (select id from ok) returning id
       ), run as (
         insert into runs (id, workspace_id, kind, app_id, session_id, serial_key, input, max_attempts,
           status, lease_owner, lease_expires_at, heartbeat_at, attempts, started_at, trace_parent)
         select ?::uuid, ${ws}, 'turn', ok.app_id, ok.id, 'session:' || ok.id, ${inputSql}, 1,
           case when ok.free and ?::boolean then 'running' else 'pending' end,
           case when ok.free and ?::boolean then ?::text end,
           case when ok.free and ?::boolean then now() + ?::interval end,
           case when ok.free and ?::boolean then now() end,
           case when ok.free and ?::boolean then 1 else 0 end,
           case when ok.free and ?::boolean then now() end, ?::text
         from ok returning *
       )`,
    params: [
      t.sessionId,
      ...wsParams,
      t.reject,
      t.messageId,
      ...wsParams,
      t.runId,
      t.message,
      t.runId,
      ...wsParams,
      JSON.stringify(t.input),
      claim,
      claim,
      t.claimFor?.owner ?? null,
      claim,
      ms(t.claimFor?.leaseMs ?? 0),
      claim,
      claim,
      claim,
      currentTraceparent(),
    ],
  };
}

/**
 * The admission of an agent turn: one statement each, on top of the run engine's tables (the
 * run row it inserts is an ordinary run of kind `turn`).
 */
export const turnAdmission = {
  /**
   * Admits an agent turn in ONE statement: finds the session (in the workspace) and its
   * agent, looks for a live turn of the session (refused under `reject`), stores the user
   * message, touches the session and inserts the run — already leased by `claimFor` when the
   * admitting process has a free turn slot and no other turn of the session is live (so no
   * wake-up and no claim round trip). Two concurrent admissions cannot both start a turn: the
   * unique index on running serial keys refuses the second (the caller retries).
   */
  async admitTurn(
    em: EntityManager,
    t: {
      runId: string;
      messageId: string;
      workspaceId: string;
      sessionId: string;
      message: string;
      input: Record<string, unknown>;
      reject: boolean;
      claimFor: { owner: string; leaseMs: number } | null;
    },
  ): Promise<TurnAdmission> {
    const q = turnAdmissionSql('?', [t.workspaceId], t);
    const rows = await em.execute<Row[]>(
      `with ${q.ctes}
       select (select count(*) from s) as found, (select id from act) as active_run_id,
         (select count(*) from msg) + (select count(*) from touched) as written,
         (select row_to_json(a) from apps a join s on a.id = s.app_id where a.app_type = 'agent') as agent,
         run.*
       from (select 1) one left join run on true`,
      q.params,
    );
    const r = rows[0] as Row;
    const agent = (typeof r.agent === 'string' ? JSON.parse(r.agent) : r.agent) as Row | null;
    return {
      missing: Number(r.found) === 0,
      activeRunId: r.id == null ? ((r.active_run_id as string) ?? null) : null,
      run: r.id == null ? null : toRun(r),
      agent,
    };
  },

  /**
   * `admitTurn` preceded by the request's own checks, in ONE statement on the plain pool
   * (decision 0029): the API key (an active key of an active workspace; `last_used_at`
   * refreshed at most once a minute), a unit of the workspace's `agent_message` rate limit
   * (only when `admit`: a valid request), and the credit check (balance above zero). The turn
   * is admitted only when all three pass. Undefined when the key does not resolve (401); the
   * caller then checks, in this order, `hits` against the rule (429), `balanceMicros` (402),
   * then the admission as `admitTurn`'s.
   */
  async admitKeyTurn(
    db: SqlExecutor,
    t: {
      keyHash: string;
      admit: boolean;
      rate: { limited: boolean; limit: number; windowSeconds: number };
      runId: string;
      messageId: string;
      sessionId: string;
      message: string;
      input: Record<string, unknown>;
      reject: boolean;
      claimFor: { owner: string; leaseMs: number } | null;
      /**
       * The first model call's credit hold (`Metering.holdInStatement`), taken only when the
       * run is admitted leased here and its agent is still the row the guess was made from
       * (decision 0029).
       */
      hold?: { ctes: string; params: unknown[]; agentId: string; agentUpdatedAt: string };
    },
  ): Promise<
    | (TurnAdmission & {
        key: { id: string; name: string | null; workspace_id: string; workspace_name: string };
        balanceMicros: number;
        hits: number | null;
        resetIn: number | null;
        /** The hold the statement took (undefined: none tried or refused). */
        held?: { micros: number; inputTokens: number };
      })
    | undefined
  > {
    const w = t.rate.windowSeconds;
    const sharded = shardedRateLimit(t.rate.limited, t.rate.limit);
    // The run records the key it was started with (usage records name it).
    const q = turnAdmissionSql(
      '(select workspace_id from go)',
      [],
      t,
      `?::jsonb || jsonb_build_object('apiKeyId', (select id from k))`,
    );
    const rows = await db.execute<Row[]>(
      `with async_commit as (select set_config('synchronous_commit', 'off', true) as v), k as (
         select k.id, k.name, k.workspace_id, w.name as workspace_name, w.credit_balance_micros as balance
           from ${API_KEY_FROM} cross join async_commit
          where ${ACTIVE_API_KEY_WHERE}
       ), ${TOUCH_API_KEY_CTE}, ${rateLimitCte('?::boolean', sharded)}, go as (
         select k.workspace_id from k
          where ?::boolean and k.balance > 0
            and (not ?::boolean or coalesce((select hits from rl), 0) <= ?::int)
       ), ${q.ctes}${
         t.hold && t.claimFor
           ? `, hold_src as (
         select run.workspace_id, 0::bigint as extra_chars,
                jsonb_build_object('workspaceId', run.workspace_id, 'apiKeyId', (select id from k),
                                   'sessionId', run.session_id) as usage_patch
           from run join apps a on a.id = run.app_id
          where run.status = 'running' and run.lease_owner = ?::text
            and a.id = ?::uuid and a.updated_at = ?::timestamptz
       ), ${t.hold.ctes}`
           : ''
       }
       select k.id as key_id, k.name as key_name, k.workspace_id as key_workspace_id,
         k.workspace_name as key_workspace_name, k.balance, rl.hits, rl.reset_in,
         (select count(*) from s) as found, (select id from act) as active_run_id,
         (select row_to_json(a) from apps a join s on a.id = s.app_id where a.app_type = 'agent') as agent,
         (select row_to_json(run) from run) as run_row${
           t.hold && t.claimFor
             ? ', (select held from hold_upd) as hold_held, (select tokens from hold_upd) as hold_tokens'
             : ''
         }
       from k left join rl on true`,
      [
        t.keyHash,
        // No unit taken (no row written, no row lock shared by the workspace's turns) when the
        // bucket has no limit, as `metering.rateLimit` does.
        ...rateLimitCteParams('agent_message:', w, sharded, [t.admit && t.rate.limited]),
        t.admit,
        t.rate.limited,
        t.rate.limit,
        ...q.params,
        ...(t.hold && t.claimFor
          ? [t.claimFor.owner, t.hold.agentId, t.hold.agentUpdatedAt, ...t.hold.params]
          : []),
      ],
    );
    const r = rows[0];
    if (!r) return undefined;
    const parse = (v: unknown) => (typeof v === 'string' ? JSON.parse(v) : v) as Row | null;
    const run = parse(r.run_row);
    return {
      key: {
        id: r.key_id as string,
        name: (r.key_name as string | null) ?? null,
        workspace_id: r.key_workspace_id as string,
        workspace_name: (r.key_workspace_name as string) ?? '',
      },
      balanceMicros: Number(r.balance),
      hits: r.hits == null ? null : Number(r.hits),
      resetIn: r.reset_in == null ? null : Number(r.reset_in),
      missing: Number(r.found) === 0,
      activeRunId: run ? null : ((r.active_run_id as string) ?? null),
      run: run ? toRun(run) : null,
      agent: parse(r.agent),
      held:
        r.hold_held == null ? undefined : { micros: Number(r.hold_held), inputTokens: Number(r.hold_tokens) },
    };
  },
};
