import type { EntityManager } from '@mikro-orm/postgresql';
import type { Metering } from '../../metering/types.js';
import type { RequestUsage, WorkspaceUsage } from './schema.js';

/** How many failed calls the usage summary lists. */
export const RECENT_ERRORS_LIMIT = 20;
export const DEFAULT_USAGE_DAYS = 30;

type Totals = { requests: string; input_tokens: string; output_tokens: string; cost_micros: string };

const totals = (r: Totals) => ({
  requests: Number(r.requests),
  inputTokens: Number(r.input_tokens),
  outputTokens: Number(r.output_tokens),
  costUsd: Number(r.cost_micros) / 1_000_000,
});

const sums = (t = '') => `count(*) as requests, coalesce(sum(${t}input_tokens), 0) as input_tokens,
  coalesce(sum(${t}output_tokens), 0) as output_tokens, coalesce(sum(${t}cost_micros), 0) as cost_micros`;
const SUMS = sums();

/**
 * The workspace's usage over the last `days` days (UTC, today included) from `usage_records`:
 * totals, by day (every day of the window, zeros included), by model, by API key, and the most
 * recent failed calls; with the credit balance and the token quota of the current cycle.
 */
export async function workspaceUsage(
  em: EntityManager,
  metering: Metering,
  workspaceId: string,
  days = DEFAULT_USAGE_DAYS,
  now = new Date(),
): Promise<WorkspaceUsage> {
  const from = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - (days - 1)));
  const window = [workspaceId, from.toISOString()];
  const where = 'workspace_id = ? and created_at >= ?';
  const [all, byDay, byModel, byKey, errors, balance, quota] = await Promise.all([
    em.execute<(Totals & { errors: string })[]>(
      `select ${SUMS}, count(*) filter (where provider_status <> 'success') as errors
       from usage_records where ${where}`,
      window,
    ),
    em.execute<(Totals & { day: string })[]>(
      `select to_char((created_at at time zone 'UTC')::date, 'YYYY-MM-DD') as day, ${SUMS}
       from usage_records where ${where} group by 1 order by 1`,
      window,
    ),
    em.execute<(Totals & { model: string })[]>(
      `select model, ${SUMS} from usage_records where ${where}
       group by model order by sum(cost_micros) desc, model`,
      window,
    ),
    em.execute<(Totals & { api_key_id: string | null; name: string | null; key_prefix: string | null })[]>(
      `select u.api_key_id, k.name, k.key_prefix, ${sums('u.')}
       from usage_records u left join api_keys k on k.id = u.api_key_id
       where u.workspace_id = ? and u.created_at >= ?
       group by u.api_key_id, k.name, k.key_prefix order by sum(u.cost_micros) desc, k.name nulls last`,
      window,
    ),
    em.execute<
      {
        id: string;
        created_at: string;
        endpoint: string;
        model: string;
        provider_status: string;
        request_id: string;
        api_key_id: string | null;
      }[]
    >(
      `select id, created_at, endpoint, model, provider_status, request_id, api_key_id
       from usage_records where ${where} and provider_status <> 'success'
       order by created_at desc, id limit ${RECENT_ERRORS_LIMIT}`,
      window,
    ),
    em.execute<{ b: string }[]>('select credit_balance_micros as b from workspaces where id = ?', [
      workspaceId,
    ]),
    metering.tokenQuotaStatus(workspaceId),
  ]);
  const perDay = new Map(byDay.map((r) => [r.day, totals(r)]));
  const dayList: WorkspaceUsage['byDay'] = [];
  for (let i = 0; i < days; i++) {
    const date = new Date(from.getTime() + i * 86_400_000).toISOString().slice(0, 10);
    dayList.push({
      date,
      ...(perDay.get(date) ?? { requests: 0, inputTokens: 0, outputTokens: 0, costUsd: 0 }),
    });
  }
  const first = all[0] ?? {
    requests: '0',
    input_tokens: '0',
    output_tokens: '0',
    cost_micros: '0',
    errors: '0',
  };
  return {
    from: from.toISOString(),
    to: now.toISOString(),
    credits: { balanceUsd: Number(balance[0]?.b ?? 0) / 1_000_000 },
    tokenQuota: {
      quota: quota.quota,
      used: quota.used,
      cycleStart: quota.cycleStart.toISOString(),
      resetsAt: quota.resetsAt.toISOString(),
    },
    totals: { ...totals(first), errors: Number(first.errors) },
    byDay: dayList,
    byModel: byModel.map((r) => ({ model: r.model, ...totals(r) })),
    byApiKey: byKey.map((r) => ({
      apiKeyId: r.api_key_id,
      name: r.name,
      prefix: r.key_prefix,
      ...totals(r),
    })),
    recentErrors: errors.map((r) => ({
      id: r.id,
      createdAt: new Date(r.created_at).toISOString(),
      endpoint: r.endpoint,
      model: r.model,
      status: r.provider_status,
      requestId: r.request_id,
      apiKeyId: r.api_key_id,
    })),
  };
}

/** The usage records one request wrote (by its `X-Request-Id`), oldest first; none yet: empty. */
export async function requestUsage(
  em: EntityManager,
  workspaceId: string,
  requestId: string,
): Promise<RequestUsage> {
  const rows = await em.execute<
    {
      id: string;
      created_at: string;
      endpoint: string;
      model: string;
      input_tokens: string;
      output_tokens: string;
      cost_micros: string;
      provider_status: string;
      latency_ms: number;
      api_key_id: string | null;
    }[]
  >(
    `select id, created_at, endpoint, model, input_tokens, output_tokens, cost_micros, provider_status,
            latency_ms, api_key_id
     from usage_records where workspace_id = ? and request_id = ? order by created_at, id limit 100`,
    [workspaceId, requestId],
  );
  return {
    data: rows.map((r) => ({
      id: r.id,
      createdAt: new Date(r.created_at).toISOString(),
      endpoint: r.endpoint,
      model: r.model,
      inputTokens: Number(r.input_tokens),
      outputTokens: Number(r.output_tokens),
      costUsd: Number(r.cost_micros) / 1_000_000,
      status: r.provider_status,
      latencyMs: Number(r.latency_ms),
      apiKeyId: r.api_key_id,
    })),
  };
}
