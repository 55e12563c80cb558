/**
 * examples/conversation-report: what your app's users talked about, as a board-ready report.
 *
 *   AI_SUITE_API_KEY=svc_ai_… pnpm --filter @ai-suite/example-conversation-report start -- 2026-11-01 2026-11-30
 *
 * Reads every conversation of the period through `client.insights.conversations` (paging
 * through the list, then the detail of the most expensive ones for samples), aggregates them
 * (per app, per status, cost, tokens) and hands the aggregates and samples to
 * `client.artifacts.generate`, which returns a structured insight report (spec 2.13). Prints it
 * as Markdown.
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { AiSuite, type ConversationSummary, type InsightReport } from '@ai-suite/sdk';

export interface ConversationReportOptions {
  client: AiSuite;
  /** ISO 8601 dates, inclusive (a bare `to` date covers its day). */
  from?: string;
  to?: string;
  /** Conversations whose messages go to the model as samples (default 5, the costliest). */
  samples?: number;
  log?: (line: string) => void;
}

/** Every conversation of the period: the SDK walks the list's pages, 100 at a time. */
export async function allConversations(
  client: AiSuite,
  query: { from?: string; to?: string },
): Promise<ConversationSummary[]> {
  const out: ConversationSummary[] = [];
  for await (const c of client.insights.conversations.list({ ...query, limit: 100 })) out.push(c);
  return out;
}

const round = (n: number, digits = 6) => Number(n.toFixed(digits));

function count<T>(items: T[], key: (t: T) => string): { key: string; count: number }[] {
  const m = new Map<string, number>();
  for (const t of items) m.set(key(t), (m.get(key(t)) ?? 0) + 1);
  return [...m].map(([k, n]) => ({ key: k, count: n })).sort((a, b) => b.count - a.count);
}

export async function conversationReport(opts: ConversationReportOptions) {
  const { client } = opts;
  const log = opts.log ?? (() => {});
  const conversations = await allConversations(client, { from: opts.from, to: opts.to });
  log(`${conversations.length} conversations`);
  const totals = conversations.reduce(
    (t, c) => ({
      costUsd: t.costUsd + c.usage_summary.totalCostUsd,
      inputTokens: t.inputTokens + c.usage_summary.inputTokens,
      outputTokens: t.outputTokens + c.usage_summary.outputTokens,
      requests: t.requests + c.usage_summary.requestCount,
      messages: t.messages + (c.message_count ?? 0),
    }),
    { costUsd: 0, inputTokens: 0, outputTokens: 0, requests: 0, messages: 0 },
  );
  const users = new Set(conversations.map((c) => c.user_key).filter(Boolean));
  // The costliest conversations become the samples: their first user messages, cut short.
  const costliest = [...conversations]
    .sort((a, b) => b.usage_summary.totalCostUsd - a.usage_summary.totalCostUsd)
    .slice(0, opts.samples ?? 5);
  const samples = [];
  for (const c of costliest) {
    const { data: detail } = await client.insights.conversations.get(c.id);
    const firstAsk = detail.messages.find((m) => m.role === 'user')?.content ?? '';
    samples.push({
      id: c.id,
      fields: {
        app: c.app_name ?? c.app_id,
        status: c.status ?? 'unknown',
        messages: c.message_count ?? 0,
        costUsd: round(c.usage_summary.totalCostUsd),
        firstQuestion: firstAsk.slice(0, 500),
      },
    });
  }
  const { data, meta } = await client.artifacts.generate({
    scope: { level: 'organization', label: 'Conversations of our apps' },
    period: { ...(opts.from ? { start: opts.from } : {}), ...(opts.to ? { end: opts.to } : {}) },
    input: {
      aggregates: {
        recordCount: conversations.length,
        metrics: {
          conversations: conversations.length,
          distinctUsers: users.size,
          messages: totals.messages,
          modelRequests: totals.requests,
          inputTokens: totals.inputTokens,
          outputTokens: totals.outputTokens,
          costUsd: round(totals.costUsd),
        },
        breakdowns: [
          { dimension: 'app', rows: count(conversations, (c) => c.app_name ?? c.app_id).slice(0, 100) },
          { dimension: 'status', rows: count(conversations, (c) => c.status ?? 'unknown') },
        ],
      },
      samples,
      context: { audienceProfile: 'leadership', instructions: 'Say where usage and cost come from.' },
    },
  });
  log(
    `report ${meta.workflowRunId}: ${data.usage.inputTokens + data.usage.outputTokens} tokens, $${data.usage.costUsd}`,
  );
  return { report: data.outputSnapshot, usage: data.usage, conversations: conversations.length };
}

/** The report as Markdown. */
export function toMarkdown(r: InsightReport): string {
  const lines = [`# Conversation report`, '', r.llm.executiveSummary, '', '## Insights', ''];
  for (const i of r.llm.insights) {
    lines.push(`### ${i.title} (${i.category.replaceAll('_', ' ')})`, '', i.body, '');
    for (const e of i.evidence) lines.push(`- ${e}`);
    lines.push('');
  }
  if (r.llm.followUpConsiderations.length > 0) {
    lines.push('## Follow-ups', '');
    for (const f of r.llm.followUpConsiderations)
      lines.push(`- **${f.title}** (${f.attentionLevel}): ${f.body}`);
    lines.push('');
  }
  lines.push('## Confidence', '', r.llm.confidenceNotes, '');
  return lines.join('\n');
}

const isMain =
  process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname);
if (isMain) {
  // parseArgs ends options at `--`, so `pnpm … start -- 2026-11-01` and `pnpm … start 2026-11-01` agree.
  const [from, to] = parseArgs({ allowPositionals: true }).positionals;
  conversationReport({ client: new AiSuite(), from, to, log: (l) => console.error(l) }).then(
    (r) => console.log(toMarkdown(r.report)),
    (err) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
