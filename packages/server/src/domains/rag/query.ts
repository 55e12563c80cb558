import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { AppError, appError, type ErrorBody } from '../../errors/index.js';
import { MeteredCall, metered } from '../../generation/metered-call.js';
import { cycleStart } from '../../metering/cycle.js';
import type { LlmMessage } from '../../providers/llm.js';
import { estimateTokens, messageChars } from '../../providers/tokens.js';
import { CHUNK_CHARS } from './chunk.js';
import { RagDocuments } from './documents.js';
import { fuse, RagRetrieval, round } from './retrieval.js';
import type { RagQueryInput, RagQueryResult, RagSource } from './schema.js';

export const RAG_QUERY_ENDPOINT = '/rag/query';
/** Previous turns of a `session_id` the model sees. */
const HISTORY_TURNS = 5;
/** What the model replies when the sources do not hold the answer (replaced by NOT_FOUND_ANSWER). */
const NOT_FOUND_MARKER = 'NOT_IN_DOCUMENTS';
export const NOT_FOUND_ANSWER = 'The documents do not contain an answer to this question.';

/** 429 of spec 7: `quota` and `current_usage` are fields of the body, and repeated in `details`. */
export class QuotaExceededError extends AppError {
  constructor(
    readonly quota: number,
    readonly currentUsage: number,
  ) {
    super('QUOTA_EXCEEDED', { details: { quota, current_usage: currentUsage } });
  }
  override toBody(): ErrorBody {
    return { ...super.toBody(), quota: this.quota, current_usage: this.currentUsage } as ErrorBody;
  }
}

/**
 * The answer to a question (spec 4.12): the monthly quota, the credit holds, retrieval, then the
 * chat model answering from the retrieved chunks only.
 */
export class RagQuery {
  constructor(
    private readonly deps: ServerDeps,
    private readonly em: EntityManager = deps.em(),
    private readonly documents: RagDocuments = new RagDocuments(deps, em),
    private readonly retrieval: RagRetrieval = new RagRetrieval(deps, em, documents),
  ) {}

  // ---------- quota ----------

  /** The workspace's monthly query quota (CLI) or the `RAG_MONTHLY_QUERY_QUOTA` default; null = unlimited. */
  async quotaStatus(workspaceId: string): Promise<{ quota: number | null; used: number; since: Date }> {
    const rows = await this.em.execute<{ q: number | null; anchor: Date | string }[]>(
      'select rag_monthly_query_quota as q, billing_cycle_anchor as anchor from workspaces where id = ?',
      [workspaceId],
    );
    const row = rows[0];
    const since = cycleStart(new Date(row?.anchor ?? Date.now()), new Date());
    const quota =
      row?.q !== null && row?.q !== undefined ? Number(row.q) : this.deps.config.rag.monthlyQueryQuota;
    const used = await this.em.execute<{ n: string | number }[]>(
      'select count(*) as n from rag_queries where workspace_id = ? and created_at >= ?',
      [workspaceId, since],
    );
    return { quota, used: Number(used[0]?.n ?? 0), since };
  }

  /**
   * Takes one query of the month's quota, atomically (the workspace row is locked while
   * counting, so concurrent queries cannot both take the last one); 429 when it is spent.
   */
  private async reserveQuery(
    workspaceId: string,
    principal: Principal,
    input: RagQueryInput,
  ): Promise<string> {
    const id = randomUUID();
    await this.em.transactional(async (em) => {
      await em.execute('select id from workspaces where id = ? for update', [workspaceId]);
      const status = await new RagQuery(this.deps, em).quotaStatus(workspaceId);
      if (status.quota !== null && status.used >= status.quota) {
        throw new QuotaExceededError(status.quota, status.used);
      }
      await em.execute(
        'insert into rag_queries (id, workspace_id, user_id, session_id, query, answer) values (?, ?, ?, ?, ?, ?)',
        [id, workspaceId, principal.userId ?? null, input.options?.session_id ?? null, input.query, ''],
      );
    });
    return id;
  }

  // ---------- query ----------

  /** `query` with anything unexpected reported as 500 `Failed to process query` (spec 7). */
  async queryOr500(principal: Principal, input: RagQueryInput, requestId: string): Promise<RagQueryResult> {
    try {
      return await this.query(principal, input, requestId);
    } catch (err) {
      if (err instanceof AppError) throw err;
      this.deps.log.error({ err }, 'RAG query failed');
      throw appError('RAG_QUERY_FAILED');
    }
  }

  async query(principal: Principal, input: RagQueryInput, requestId: string): Promise<RagQueryResult> {
    const t0 = performance.now();
    const workspaceId = input.workspace_id;
    await this.documents.assertAccess(principal, workspaceId);
    await this.documents.assertEnabled(workspaceId);
    const chatModel = this.deps.models.resolve('chat');
    const queryId = await this.reserveQuery(workspaceId, principal, input);
    const maxSources = input.options?.max_sources ?? 5;
    const threshold = input.options?.confidence_threshold ?? 0.7;
    const includeMetadata = input.options?.include_metadata ?? true;
    const sessionId = input.options?.session_id;
    let done = false;
    try {
      // Earlier turns of the conversation (oldest first): they shape the answer and, joined
      // to the question, the retrieval of a follow-up such as "and on page two?".
      const history = sessionId
        ? (
            await this.em.execute<{ query: string; answer: string }[]>(
              `select query, answer from rag_queries where workspace_id = ? and session_id = ? and id <> ? and answer <> ''
               order by created_at desc limit ${HISTORY_TURNS}`,
              [workspaceId, sessionId, queryId],
            )
          ).reverse()
        : [];
      const retrievalText = [...history.slice(-1).map((h) => h.query), input.query].join('\n');

      // The answer's hold first (issue 18): a query the balance cannot answer is refused with
      // 402 before anything is sent upstream, the query embedding included. The sources are not
      // known yet, so the prompt is sized for `maxSources` full chunks; the ratio the upstream's
      // reports show against that bound (learned per model and endpoint) brings the hold down
      // to the prompts actually sent.
      // It also holds the embedding's expected cost, which the embedding's own hold may then
      // take below zero: a query admitted is never refused at its second hold.
      const bound = messageChars(buildMessages(input.query, [], history)) + maxSources * (CHUNK_CHARS + 100);
      const embedModel = this.documents.embeddingModel();
      const embedTokens = estimateTokens(retrievalText.length);
      const embedHold = embedModel
        ? this.deps.metering.expectedHoldMicros(embedModel, RAG_QUERY_ENDPOINT, embedTokens)
        : 0;
      const chatMeter = await this.deps.metering.startGeneration(
        { workspaceId, requestId, endpoint: RAG_QUERY_ENDPOINT, model: chatModel, meter: 'credits' },
        { inputTokens: estimateTokens(bound), extraMicros: embedHold },
      );
      // The answer's call: settled once, the hold back whole when no call was made (nothing
      // retrieved, or the retrieval failed).
      const chat = new MeteredCall(this.deps.llm, chatMeter);
      let answer = NOT_FOUND_ANSWER;
      let found = false;
      let inputTokens = 0;
      let outputTokens = 0;
      let embeddingTokens = 0;
      let embedCost = 0;
      let retrievalMs = 0;
      let t1 = 0;
      let sources: RagSource[] = [];
      await metered(chat, async () => {
        // Retrieval: the query embedding (metered) and the two stages.
        let vector: number[] | undefined;
        if (embedModel) {
          const meter = await this.deps.metering.startGeneration(
            { workspaceId, requestId, endpoint: RAG_QUERY_ENDPOINT, model: embedModel, meter: 'credits' },
            { inputTokens: embedTokens, prepaidMicros: embedHold },
          );
          let status = 'error';
          try {
            const res = await this.deps.llm.embed(embedModel, [retrievalText]);
            meter.addUsage(res.usage);
            vector = res.vectors[0];
            embeddingTokens = res.usage.inputTokens;
            status = 'success';
          } finally {
            embedCost = (await meter.finish(status)).costMicros;
          }
        }
        const [fts, vec] = await Promise.all([
          this.retrieval.fullTextStage(workspaceId, retrievalText),
          vector ? this.retrieval.vectorStage(workspaceId, vector) : Promise.resolve(undefined),
        ]);
        // The threshold applies to the score as the answer shows it (rounded to 4 digits), so a
        // source shown with relevance_score x is kept at confidence_threshold x and dropped above.
        const fused = fuse(fts, vec)
          .filter((c) => round(c.relevance) >= threshold)
          .slice(0, maxSources);
        sources = await this.retrieval.loadSources(fused, input.query, includeMetadata);
        retrievalMs = performance.now() - t0;

        // Generation from the retrieved chunks only.
        t1 = performance.now();
        if (sources.length > 0) {
          const messages = buildMessages(input.query, sources, history);
          const res = await chat.complete({ model: chatModel, messages, temperature: 0 });
          inputTokens = res.usage.inputTokens;
          outputTokens = res.usage.outputTokens;
          const text = res.text.trim();
          found = text.length > 0 && !text.includes(NOT_FOUND_MARKER);
          answer = found ? text : NOT_FOUND_ANSWER;
        }
      });
      const chatCost = chat.settlement?.costMicros ?? 0;
      const generationMs = performance.now() - t1;

      // Confidence of the answer: the mean confidence of the sources it cites (all sources when
      // it cites none); 0 when the documents do not hold the answer.
      const cited = new Set([...answer.matchAll(/\[(\d+)\]/g)].map((m) => Number(m[1])));
      const citedSources = sources.filter((_, i) => cited.has(i + 1));
      const basis = citedSources.length > 0 ? citedSources : sources;
      const confidence =
        found && basis.length > 0 ? basis.reduce((s, x) => s + x.confidence, 0) / basis.length : 0;

      await this.em.execute('update rag_queries set answer = ? where id = ?', [answer, queryId]);
      done = true;
      const costMicros = embedCost + chatCost;
      return {
        status: 'success',
        result: { answer, confidence: round(confidence), sources },
        usage: {
          input_tokens: inputTokens,
          output_tokens: outputTokens,
          total_tokens: inputTokens + outputTokens,
          embedding_tokens: embeddingTokens,
          cost_usd: costMicros / 1_000_000,
          model: chatModel.id,
        },
        performance: {
          retrieval_ms: round(retrievalMs, 1),
          generation_ms: round(generationMs, 1),
          total_ms: round(performance.now() - t0, 1),
        },
        workspace_id: workspaceId,
        timestamp: new Date().toISOString(),
      };
    } finally {
      // A failed query does not count against the quota.
      if (!done)
        await this.em.execute('delete from rag_queries where id = ?', [queryId]).catch(() => undefined);
    }
  }
}

/** The prompt: numbered sources, the rule to use only them and cite them, the honest "not found". */
export function buildMessages(
  query: string,
  sources: RagSource[],
  history: { query: string; answer: string }[],
): LlmMessage[] {
  const system =
    'You answer questions using only the numbered sources given with the question. ' +
    'Cite the sources you use with their numbers in square brackets, e.g. [1] or [2][3], right after the statement they support. ' +
    `If the sources do not contain the answer, reply exactly ${NOT_FOUND_MARKER} and nothing else. ` +
    'Never use knowledge from outside the sources.';
  const context = sources
    .map((s, i) => `[${i + 1}] ${s.document}, page ${s.page}:\n${s.content}`)
    .join('\n\n');
  const messages: LlmMessage[] = [{ role: 'system', content: system }];
  for (const h of history) {
    messages.push({ role: 'user', content: h.query }, { role: 'assistant', content: h.answer });
  }
  messages.push({ role: 'user', content: `Sources:\n\n${context}\n\nQuestion: ${query}` });
  return messages;
}
