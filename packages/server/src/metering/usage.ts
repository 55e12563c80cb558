import type { SqlExecutor } from '../db/sql.js';
import type { UsageComponentLine, UsageRecordInput } from './types.js';

/** A usage record as the set-based insert reads it (snake_case JSON). */
export interface UsageRow {
  workspace_id: string;
  api_key_id: string | null;
  app_id: string | null;
  thread_id: string | null;
  session_id: string | null;
  run_id: string | null;
  request_id: string;
  endpoint: string;
  model: string;
  meter: 'tokens' | 'credits';
  input_tokens: number;
  output_tokens: number;
  cost_micros: number;
  provider_status: string;
  latency_ms: number;
  component_lines: UsageComponentLine[];
  /** Set when the tokens count against the workspace's quota of that billing cycle. */
  cycle_start: string | null;
  /** The `/chat` quota reservation this record releases. */
  reservation_id: string | null;
}

export function usageRow(rec: UsageRecordInput, cycle: Date | null): UsageRow {
  return {
    workspace_id: rec.workspaceId,
    api_key_id: rec.apiKeyId ?? null,
    app_id: rec.appId ?? null,
    thread_id: rec.threadId ?? null,
    session_id: rec.sessionId ?? null,
    run_id: rec.runId ?? null,
    request_id: rec.requestId,
    endpoint: rec.endpoint,
    model: rec.model,
    meter: rec.meter,
    input_tokens: rec.inputTokens,
    output_tokens: rec.outputTokens,
    cost_micros: rec.costMicros,
    provider_status: rec.providerStatus,
    latency_ms: Math.max(0, Math.round(rec.latencyMs)),
    component_lines: rec.componentLines ?? [],
    cycle_start: cycle ? cycle.toISOString() : null,
    reservation_id: rec.reservationId ?? null,
  };
}

/**
 * Gathers usage records and writes them in one statement: when `maxRows` are pending, or
 * `delayMs` after the first one. Each `add` settles when its record is committed (a failed
 * batch is retried one record per statement; `add` rejects only if its own record fails). Off the response path: `/chat` writes
 * usage after the stream, so the delay costs no latency, and under load one statement per
 * batch replaces one per request.
 */
export class UsageBatcher {
  private pending: { row: UsageRow; resolve: () => void; reject: (err: unknown) => void }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly write: (rows: UsageRow[]) => Promise<void>,
    private readonly opts: { maxRows: number; delayMs: number } = { maxRows: 200, delayMs: 10 },
  ) {}

  add(row: UsageRow): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push({ row, resolve, reject });
      if (this.pending.length >= this.opts.maxRows) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), this.opts.delayMs);
    });
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    // A failed batch (say, one record of a workspace deleted meanwhile) is written again one
    // record per statement, so a bad record fails alone.
    const done = this.write(batch.map((b) => b.row))
      .then(
        () => {
          for (const b of batch) b.resolve();
        },
        () => Promise.all(batch.map((b) => this.write([b.row]).then(b.resolve, b.reject))).then(() => {}),
      )
      .finally(() => this.inFlight.delete(done));
    this.inFlight.add(done);
  }

  /** Writes what is pending and waits for every batch in flight. */
  async close(): Promise<void> {
    this.flush();
    await Promise.all([...this.inFlight]);
  }
}

/**
 * One statement for any number of records: the records, the keys' totals and the
 * workspaces' cycle tokens, aggregated per key and per workspace and cycle.
 */
export async function writeUsage(db: () => SqlExecutor, rows: UsageRow[]): Promise<void> {
  await db().execute(
    `with input as (
         select * from jsonb_to_recordset(?::jsonb) as x(
           workspace_id uuid, api_key_id uuid, app_id text, thread_id text, session_id text, run_id text,
           request_id text, endpoint text, model text, meter text, input_tokens bigint, output_tokens bigint,
           cost_micros bigint, provider_status text, latency_ms integer, component_lines jsonb,
           cycle_start timestamptz, reservation_id uuid)
       ), rec as (
         insert into usage_records (id, workspace_id, api_key_id, app_id, thread_id, session_id, run_id,
           request_id, endpoint, model, meter, input_tokens, output_tokens, cost_micros, provider_status,
           latency_ms, component_lines)
         select gen_random_uuid(), workspace_id, api_key_id, app_id, thread_id, session_id, run_id,
           request_id, endpoint, model, meter, input_tokens, output_tokens, cost_micros, provider_status,
           latency_ms, component_lines
           from input
       ), key as (
         update api_keys k set request_count = k.request_count + a.n, input_tokens = k.input_tokens + a.i,
           output_tokens = k.output_tokens + a.o, cost_micros = k.cost_micros + a.c
           from (select api_key_id, workspace_id, count(*) as n, sum(input_tokens) as i,
                        sum(output_tokens) as o, sum(cost_micros) as c
                   from input where api_key_id is not null group by api_key_id, workspace_id) a
          where k.id = a.api_key_id and k.workspace_id = a.workspace_id
       ), rel as (
         -- Releases the quota reservations (only those still there: an expired one was dropped).
         delete from token_reservations
          where id in (select reservation_id from input where reservation_id is not null)
         returning workspace_id, cycle_start, tokens
       ), agg as (
         select workspace_id, cycle_start, sum(t) as t, sum(r) as r from (
           select workspace_id, cycle_start, input_tokens + output_tokens as t, 0::bigint as r
             from input where cycle_start is not null
           union all
           select workspace_id, cycle_start, 0::bigint, tokens from rel
         ) x group by workspace_id, cycle_start
       )
       -- In key order, so concurrent batches lock the cycle rows in the same order.
       insert into workspace_token_usage as u (workspace_id, cycle_start, tokens, reserved)
       select workspace_id, cycle_start, t, 0 from agg order by workspace_id, cycle_start
       on conflict (workspace_id, cycle_start)
       do update set tokens = u.tokens + excluded.tokens,
         reserved = greatest(0, u.reserved - (select r from agg
                                               where agg.workspace_id = excluded.workspace_id
                                                 and agg.cycle_start = excluded.cycle_start)),
         updated_at = now()`,
    [JSON.stringify(rows)],
  );
}
