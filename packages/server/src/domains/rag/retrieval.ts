import type { EntityManager } from '@mikro-orm/postgresql';
import type { ServerDeps } from '../../context.js';
import { arrayLiteral, RagDocuments, unit, type VectorMode, vectorLiteral } from './documents.js';
import type { RagSource } from './schema.js';

/** Candidates each retrieval stage hands to the fusion. */
export const STAGE_CANDIDATES = 50;
/** Reciprocal rank fusion constant (Cormack et al.): score = Σ 1 / (k + rank). */
export const RRF_K = 60;
/** `hnsw.ef_search` of the vector stage (recall measured in bench/rag). */
export const HNSW_EF_SEARCH = 100;

/** One lexeme as a `tsquery` literal (quoted: the lexeme is taken as is, no dictionary). */
const tsLexeme = (l: string) => `'${l.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;

/**
 * Full-text candidates (decision 0033): the chunks containing the question's rarest lexemes,
 * taken in ascending document frequency while their frequencies add up to at most this many
 * (always at least the rarest one). Bounds the rows the stage reads and ranks, whatever the
 * workspace's size.
 */
export const FTS_CANDIDATE_BUDGET = 2000;
/** At most this many chunks are ranked (when even the rarest lexeme is in more chunks). */
export const FTS_CANDIDATE_CAP = 2000;

/** BM25's inverse document frequency (with +1, never negative): ln(1 + (N − df + 0.5) / (df + 0.5)). */
export const idf = (n: number, df: number) => Math.log(1 + (n - df + 0.5) / (df + 0.5));

export interface FullTextPlan {
  /** The question's lexemes found in the workspace, rarest first, with their weights. */
  terms: { lexeme: string; df: number; idf: number }[];
  /** Chunks in the workspace. */
  chunks: number;
  /** Lexemes whose chunks are the candidates (a prefix of `terms`). */
  candidateTerms: number;
  /** Also the chunks containing every lexeme (the question has only common words). */
  conjunction: boolean;
}

/** Which lexemes select the candidates: rarest first, within `FTS_CANDIDATE_BUDGET`. */
export function planFullText(terms: { lexeme: string; df: number }[], chunks: number): FullTextPlan {
  const sorted = terms
    .filter((t) => t.df > 0)
    .sort((a, b) => a.df - b.df || (a.lexeme < b.lexeme ? -1 : a.lexeme > b.lexeme ? 1 : 0))
    .map((t) => ({ ...t, idf: idf(chunks, t.df) }));
  let sum = 0;
  let k = 0;
  while (k < sorted.length && sum + (sorted[k]?.df ?? 0) <= FTS_CANDIDATE_BUDGET) sum += sorted[k++]?.df ?? 0;
  const conjunction = k === 0 && sorted.length > 1;
  return { terms: sorted, chunks, candidateTerms: Math.max(k, Math.min(1, sorted.length)), conjunction };
}

/** The question's lexemes with their document frequency, and the workspace's chunk count (`''`). */
export const FULL_TEXT_STATS_SQL = `select q.l as lexeme, d.df, n.df as n
  from unnest(tsvector_to_array(to_tsvector('english'::regconfig, ?))) as q(l)
  left join rag_lexeme_df d on d.workspace_id = ? and d.lexeme = q.l
  left join rag_lexeme_df n on n.workspace_id = ? and n.lexeme = ''`;

/**
 * The ranking statement of the full-text stage for a plan (`?` placeholders), undefined when
 * no lexeme of the question occurs in the workspace. A chunk's score is the sum of the idf of
 * the distinct question lexemes it contains; ties go to `ts_rank_cd`, then the id.
 */
export function rankFullTextSql(
  workspaceId: string,
  plan: FullTextPlan,
  limit: number,
): { sql: string; params: unknown[] } | undefined {
  const { terms } = plan;
  if (terms.length === 0) return undefined;
  const any = (ts: typeof terms) => ts.map((t) => tsLexeme(t.lexeme)).join(' | ');
  const subset = `(select id from rag_chunks where workspace_id = ? and tsv @@ ?::tsquery limit ${FTS_CANDIDATE_CAP})`;
  const candidates = [subset];
  const params: unknown[] = [workspaceId, any(terms.slice(0, plan.candidateTerms))];
  if (plan.conjunction) {
    candidates.unshift(subset);
    params.unshift(workspaceId, terms.map((t) => tsLexeme(t.lexeme)).join(' & '));
  }
  const weights = terms.map(() => '(case when c.tsv @@ ?::tsquery then ?::float8 else 0 end)').join(' + ');
  return {
    sql: `select c.id::text as id, ${weights} as score, ts_rank_cd(c.tsv, ?::tsquery) as rank
      from rag_chunks c
      where c.id in (${candidates.join(' union ')})
      order by score desc, rank desc, c.id
      limit ?`,
    params: [...terms.flatMap((t) => [tsLexeme(t.lexeme), t.idf]), any(terms), ...params, limit],
  };
}

export interface Candidate {
  id: string;
  /** 1-based rank in the full-text stage, if found there. */
  ftsRank?: number;
  ftsScore?: number;
  vectorRank?: number;
  similarity?: number;
  fused: number;
  relevance: number;
}

/**
 * Reciprocal rank fusion of the two stages, normalised by the best score possible (rank 1 in
 * every stage that ran): 1 = the top hit of both, 0.5 = the top hit of one stage absent from the
 * other. See decision 0024 for why the default threshold 0.7 means "found by both stages".
 */
export function fuse(
  fts: { id: string; score: number }[],
  vec: { id: string; similarity: number }[] | undefined,
): Candidate[] {
  const byId = new Map<string, Candidate>();
  const get = (id: string) => {
    let c = byId.get(id);
    if (!c) {
      c = { id, fused: 0, relevance: 0 };
      byId.set(id, c);
    }
    return c;
  };
  fts.forEach((r, i) => {
    const c = get(r.id);
    c.ftsRank = i + 1;
    c.ftsScore = r.score;
    c.fused += 1 / (RRF_K + i + 1);
  });
  vec?.forEach((r, i) => {
    const c = get(r.id);
    c.vectorRank = i + 1;
    c.similarity = r.similarity;
    c.fused += 1 / (RRF_K + i + 1);
  });
  const stages = vec ? 2 : 1;
  const best = stages / (RRF_K + 1);
  const out = [...byId.values()];
  for (const c of out) c.relevance = Math.min(1, c.fused / best);
  return out.sort((a, b) => b.fused - a.fused || (a.ftsRank ?? 1e9) - (b.ftsRank ?? 1e9));
}

/**
 * Hybrid retrieval: the full-text and vector stages, whose candidates `fuse` merges, and the
 * sources loaded for the fused chunks.
 */
export class RagRetrieval {
  constructor(
    deps: ServerDeps,
    private readonly em: EntityManager = deps.em(),
    private readonly documents: RagDocuments = new RagDocuments(deps, em),
  ) {}

  /**
   * Full-text stage (decision 0033). The question's lexemes are weighted by rarity in the
   * workspace (BM25's idf, from `rag_lexeme_df`); a chunk scores the sum of the weights of the
   * distinct question lexemes it contains, ties broken by `ts_rank_cd` (proximity and
   * frequency). Only chunks containing the rarest lexemes are candidates (`planFullText`), at
   * most `FTS_CANDIDATE_CAP`: the cost is bounded by the budget, not by the workspace's size.
   */
  async fullTextStage(workspaceId: string, query: string, limit = STAGE_CANDIDATES) {
    const stats = await this.em.execute<{ lexeme: string; df: number | null; n: number | null }[]>(
      FULL_TEXT_STATS_SQL,
      [query, workspaceId, workspaceId],
    );
    const plan = planFullText(
      stats.map((r) => ({ lexeme: r.lexeme, df: Number(r.df ?? 0) })),
      Number(stats[0]?.n ?? 0),
    );
    const ranked = rankFullTextSql(workspaceId, plan, limit);
    if (!ranked) return [];
    const rows = await this.em.execute<{ id: string; score: number }[]>(ranked.sql, ranked.params);
    return rows.map((r) => ({ id: r.id, score: Number(r.score) }));
  }

  /**
   * Nearest chunks by cosine: HNSW through pgvector, the in-process index (exact, decision
   * 0034), or the exact scan over `real[]` in SQL (also for a workspace over the index's budget).
   */
  async vectorStage(
    workspaceId: string,
    vector: number[],
    limit = STAGE_CANDIDATES,
    mode?: VectorMode,
  ): Promise<{ id: string; similarity: number }[]> {
    const v = unit(vector);
    const dims = v.length;
    const use = mode ?? (await this.documents.vectorMode());
    let rows: { id: string; similarity: number }[];
    if (use === 'memory') {
      const hits = await this.documents.vectorIndex().search(workspaceId, v, limit);
      if (hits) return hits;
    }
    if (use === 'pgvector' && Number.isInteger(dims)) {
      rows = await this.em.transactional(async (em) => {
        await em.execute(
          `select set_config('hnsw.ef_search', '${HNSW_EF_SEARCH}', true), set_config('hnsw.iterative_scan', 'relaxed_order', true)`,
        );
        return em.execute<{ id: string; similarity: number }[]>(
          `select id::text as id, 1 - (embedding::vector(${dims}) <=> ?::vector(${dims})) as similarity
           from rag_chunks where workspace_id = ? and dims = ${dims}
           order by embedding::vector(${dims}) <=> ?::vector(${dims})
           limit ?`,
          [vectorLiteral(v), workspaceId, vectorLiteral(v), limit],
        );
      });
    } else {
      rows = await this.em.execute<{ id: string; similarity: number }[]>(
        `select c.id::text as id, (select sum(a * b) from unnest(c.embedding, ?::real[]) as t(a, b)) as similarity
         from rag_chunks c where c.workspace_id = ? and c.dims = ?
         order by similarity desc, c.id
         limit ?`,
        [arrayLiteral(v), workspaceId, dims, limit],
      );
    }
    return rows
      .map((r) => ({ id: r.id, similarity: Number(r.similarity) }))
      .sort((a, b) => b.similarity - a.similarity || Number(a.id) - Number(b.id));
  }

  /** Lexemes of the question, for the sources' coverage. */
  private async queryLexemes(query: string): Promise<string[]> {
    const rows = await this.em.execute<{ l: string[] | string | null }[]>(
      `select tsvector_to_array(to_tsvector('english'::regconfig, ?)) as l`,
      [query],
    );
    const l = rows[0]?.l;
    if (!l) return [];
    return Array.isArray(l)
      ? l
      : String(l)
          .replace(/^\{|\}$/g, '')
          .split(',')
          .filter(Boolean);
  }

  async loadSources(fused: Candidate[], query: string, includeMetadata: boolean): Promise<RagSource[]> {
    if (fused.length === 0) return [];
    const rows = await this.em.execute<
      {
        id: string;
        content: string;
        page: number;
        chunk_index: number;
        document_id: string;
        name: string;
        mime_type: string;
        lexemes: string[] | string;
      }[]
    >(
      `select c.id::text as id, c.content, c.page, c.chunk_index, d.id as document_id, d.name, d.mime_type,
              tsvector_to_array(c.tsv) as lexemes
       from rag_chunks c join rag_documents d on d.id = c.document_id
       where c.id in (${fused.map(() => '?').join(', ')})`,
      fused.map((c) => c.id),
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    const queryLexemes = await this.queryLexemes(query);
    const out: RagSource[] = [];
    for (const c of fused) {
      const r = byId.get(c.id);
      if (!r) continue;
      const lex = new Set(
        Array.isArray(r.lexemes)
          ? r.lexemes
          : String(r.lexemes)
              .replace(/^\{|\}$/g, '')
              .split(','),
      );
      const coverage =
        queryLexemes.length > 0 ? queryLexemes.filter((l) => lex.has(l)).length / queryLexemes.length : 0;
      const similarity = c.similarity === undefined ? 0 : Math.max(0, Math.min(1, c.similarity));
      const source: RagSource = {
        content: r.content,
        document: r.name,
        page: Number(r.page),
        confidence: round(Math.max(coverage, similarity)),
        relevance_score: round(c.relevance),
      };
      if (includeMetadata) {
        source.metadata = {
          document_id: r.document_id,
          chunk_index: Number(r.chunk_index),
          mime_type: r.mime_type,
          full_text_rank: c.ftsRank ?? null,
          vector_rank: c.vectorRank ?? null,
          vector_similarity: c.similarity === undefined ? null : round(c.similarity),
          term_coverage: round(coverage),
        };
      }
      out.push(source);
    }
    return out;
  }
}

/** Scores as the answer shows them (4 digits unless told). */
export const round = (n: number, digits = 4) => Math.round(n * 10 ** digits) / 10 ** digits;
