import type { EntityManager } from '@mikro-orm/postgresql';

/**
 * The in-process vector index of the RAG vector stage where the database has no pgvector
 * (decision 0034). Per workspace, the unit embeddings of its chunks live in one Float32Array per
 * dimension, loaded lazily from `rag_chunks.embedding_f32` and searched exactly (a dot product
 * per chunk, the top `limit` kept), in slices that give the event loop back between them.
 *
 * Consistency with writes and with other nodes: every search first reads the workspace's
 * `rag_indexes (vector_generation, vector_epoch)` (one primary-key row). Database triggers bump
 * the generation in the transaction that inserts chunks (and stamp the chunks with it) and the
 * epoch in the one that deletes or re-embeds chunks. A newer generation loads only the chunks
 * stamped above the one held; a newer epoch reloads the workspace.
 *
 * Memory: all workspaces share one budget (`RAG_VECTOR_CACHE_MB`); the least recently searched
 * workspaces are dropped to stay within it. A workspace larger than the whole budget is not
 * held: its searches use the exact scan in SQL.
 */

/** Chunks scored between two yields to the event loop (≈ 2 ms at 256 dimensions on a quiet core). */
export const SCORE_SLICE = 8192;
/** Rows per read while loading. */
const LOAD_PAGE = 5000;

interface Block {
  dims: number;
  n: number;
  ids: Float64Array;
  vecs: Float32Array;
}

interface Entry {
  workspaceId: string;
  generation: number;
  epoch: number;
  blocks: Map<number, Block>;
  bytes: number;
}

export interface VectorHit {
  id: string;
  similarity: number;
}

export interface VectorIndexStats {
  workspaces: number;
  bytes: number;
  budgetBytes: number;
  /** Full loads (first search, or after a delete) and incremental loads since start. */
  fullLoads: number;
  incrementalLoads: number;
  evictions: number;
  /** The longest synchronous scoring slice so far (ms): how long a search held the event loop. */
  longestSliceMs: number;
}

interface ChunkRow {
  id: string | number;
  dims: number;
  gen: string | number;
  f32: Uint8Array | string | null;
  embedding: number[] | string | null;
}

/** `bytea` as a driver returns it: a Buffer/Uint8Array (pg, PGlite) or `\x…` hex text. */
function bytesOf(v: Uint8Array | string): Uint8Array {
  if (typeof v !== 'string') return v;
  return Buffer.from(v.startsWith('\\x') ? v.slice(2) : v, 'hex');
}

/** Big-endian float4 bytes (`float4send`) into `out` at `offset`. */
function readF32BE(bytes: Uint8Array, out: Float32Array, offset: number, dims: number): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < dims; i++) out[offset + i] = view.getFloat32(i * 4, false);
}

function parseRealArray(v: number[] | string): number[] {
  if (Array.isArray(v)) return v.map(Number);
  return v
    .replace(/^\{|\}$/g, '')
    .split(',')
    .filter(Boolean)
    .map(Number);
}

const blockBytes = (b: Block) => b.ids.byteLength + b.vecs.byteLength;

function grow(b: Block, need: number): void {
  if (need <= b.ids.length) return;
  const cap = Math.max(need, Math.ceil(b.ids.length * 1.5), 1024);
  const ids = new Float64Array(cap);
  ids.set(b.ids.subarray(0, b.n));
  const vecs = new Float32Array(cap * b.dims);
  vecs.set(b.vecs.subarray(0, b.n * b.dims));
  b.ids = ids;
  b.vecs = vecs;
}

const yieldToLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

export class VectorIndex {
  private readonly entries = new Map<string, Entry>();
  /** Loads in progress per workspace: concurrent searches share one. */
  private readonly loading = new Map<string, Promise<Entry | null | undefined>>();
  /** Workspaces found larger than the budget at their last load, with the epoch/generation seen. */
  private readonly oversized = new Map<string, string>();
  private stats = { fullLoads: 0, incrementalLoads: 0, evictions: 0, longestSliceMs: 0 };

  constructor(
    private readonly em: () => EntityManager,
    readonly budgetBytes: number,
  ) {}

  info(): VectorIndexStats {
    let bytes = 0;
    for (const e of this.entries.values()) bytes += e.bytes;
    return { workspaces: this.entries.size, bytes, budgetBytes: this.budgetBytes, ...this.stats };
  }

  /** Whether the workspace's vectors are held now (tests, diagnostics). */
  holds(workspaceId: string): boolean {
    return this.entries.has(workspaceId);
  }

  /**
   * The `limit` chunks of the workspace nearest to the unit vector `q` (dot product = cosine),
   * best first, ties by chunk id. `undefined` when the workspace is over the memory budget (the
   * caller then scans in SQL).
   */
  async search(workspaceId: string, q: number[], limit: number): Promise<VectorHit[] | undefined> {
    const entry = await this.current(workspaceId);
    if (entry === undefined) return undefined;
    if (entry === null) return [];
    const block = entry.blocks.get(q.length);
    if (!block || block.n === 0 || limit <= 0) return [];
    return topK(block, Float32Array.from(q), limit, this.stats);
  }

  /** The workspace's entry, brought up to date with the database; null = no index row. */
  private async current(workspaceId: string): Promise<Entry | null | undefined> {
    const pending = this.loading.get(workspaceId);
    if (pending) return pending;
    const rows = await this.em().execute<{ g: string | number; e: string | number }[]>(
      'select vector_generation as g, vector_epoch as e from rag_indexes where workspace_id = ?',
      [workspaceId],
    );
    const row = rows[0];
    if (!row) {
      this.drop(workspaceId);
      return null;
    }
    const generation = Number(row.g);
    const epoch = Number(row.e);
    const held = this.entries.get(workspaceId);
    if (held && held.epoch === epoch && held.generation >= generation) {
      this.touch(held);
      return held;
    }
    if (!held && this.oversized.get(workspaceId) === `${epoch}/${generation}`) return undefined;
    // Another search may have started a load while this one read the row.
    const again = this.loading.get(workspaceId);
    if (again) return again;
    const load = this.load(workspaceId, held && held.epoch === epoch ? held : undefined).finally(() =>
      this.loading.delete(workspaceId),
    );
    this.loading.set(workspaceId, load);
    return load;
  }

  /**
   * Reads the workspace's chunks above `base`'s generation (all of them without `base`) in one
   * repeatable-read transaction, so the generation and epoch recorded match the rows read.
   * null = no index row; undefined = over the memory budget.
   */
  private async load(workspaceId: string, base: Entry | undefined): Promise<Entry | null | undefined> {
    const entry: Entry = base ?? { workspaceId, generation: 0, epoch: 0, blocks: new Map(), bytes: 0 };
    let tooBig = false;
    let seen = '';
    let result: Entry | null;
    try {
      result = await this.em().transactional(async (em) => {
        await em.execute('set transaction isolation level repeatable read');
        const rows = await em.execute<{ g: string | number; e: string | number }[]>(
          'select vector_generation as g, vector_epoch as e from rag_indexes where workspace_id = ?',
          [workspaceId],
        );
        const head = rows[0];
        if (!head) return null;
        const generation = Number(head.g);
        const epoch = Number(head.e);
        seen = `${epoch}/${generation}`;
        // Keyset pages in (vector_gen, id) order: a range of the (workspace_id, vector_gen, id) index.
        let afterGen = base ? base.generation : -1;
        let afterId = base ? Number.MAX_SAFE_INTEGER.toString() : '0';
        for (;;) {
          const page = await em.execute<ChunkRow[]>(
            `select id::text as id, dims, vector_gen::text as gen, embedding_f32 as f32,
                    case when embedding_f32 is null then embedding end as embedding
             from rag_chunks
             where workspace_id = ? and (vector_gen, id) > (?::bigint, ?::bigint)
               and dims is not null and embedding is not null
             order by vector_gen, id limit ${LOAD_PAGE}`,
            [workspaceId, afterGen, afterId],
          );
          for (const r of page) this.append(entry, r);
          if (entry.bytes > this.budgetBytes) {
            tooBig = true;
            return entry;
          }
          if (page.length < LOAD_PAGE) break;
          const last = page.at(-1) as ChunkRow;
          afterGen = Number(last.gen);
          afterId = String(last.id);
        }
        entry.generation = generation;
        entry.epoch = epoch;
        return entry;
      });
    } catch (err) {
      // A partial incremental load would be appended to again: start over next time.
      this.drop(workspaceId);
      throw err;
    }
    if (base) this.stats.incrementalLoads++;
    else this.stats.fullLoads++;
    if (!result) {
      this.drop(workspaceId);
      return null;
    }
    if (tooBig) {
      this.drop(workspaceId);
      this.oversized.set(workspaceId, seen);
      return undefined;
    }
    this.oversized.delete(workspaceId);
    this.entries.set(workspaceId, result);
    this.touch(result);
    this.evict(workspaceId);
    return result;
  }

  private append(entry: Entry, r: ChunkRow): void {
    const dims = Number(r.dims);
    let block = entry.blocks.get(dims);
    if (!block) {
      block = { dims, n: 0, ids: new Float64Array(0), vecs: new Float32Array(0) };
      entry.blocks.set(dims, block);
    }
    const before = blockBytes(block);
    grow(block, block.n + 1);
    const off = block.n * dims;
    if (r.f32 !== null && r.f32 !== undefined) {
      const bytes = bytesOf(r.f32);
      if (bytes.byteLength !== dims * 4) return;
      readF32BE(bytes, block.vecs, off, dims);
    } else if (r.embedding !== null && r.embedding !== undefined) {
      const v = parseRealArray(r.embedding);
      if (v.length !== dims) return;
      block.vecs.set(v, off);
    } else return;
    block.ids[block.n] = Number(r.id);
    block.n++;
    entry.bytes += blockBytes(block) - before;
  }

  /** Most recently used last. */
  private touch(entry: Entry): void {
    this.entries.delete(entry.workspaceId);
    this.entries.set(entry.workspaceId, entry);
  }

  private drop(workspaceId: string): void {
    this.entries.delete(workspaceId);
  }

  /** Drops the least recently searched workspaces until the budget holds (never `keep`). */
  private evict(keep: string): void {
    let total = 0;
    for (const e of this.entries.values()) total += e.bytes;
    for (const [id, e] of this.entries) {
      if (total <= this.budgetBytes) break;
      if (id === keep) continue;
      this.entries.delete(id);
      total -= e.bytes;
      this.stats.evictions++;
    }
  }
}

/**
 * Exact top `limit` by dot product, ties by ascending id (as the SQL scan orders them), scored
 * `SCORE_SLICE` chunks at a time with a yield to the event loop between slices.
 */
async function topK(
  block: Block,
  q: Float32Array,
  limit: number,
  stats: { longestSliceMs: number },
): Promise<VectorHit[]> {
  const { dims, ids, vecs, n } = block;
  const k = Math.min(limit, n);
  // The best k so far, sorted worst first: a new score enters when it beats best[0].
  const scores = new Float64Array(k).fill(Number.NEGATIVE_INFINITY);
  const which = new Float64Array(k).fill(Number.POSITIVE_INFINITY);
  const beats = (s: number, id: number, j: number) =>
    s > (scores[j] as number) || (s === scores[j] && id < (which[j] as number));
  for (let start = 0; start < n; start += SCORE_SLICE) {
    if (start > 0) await yieldToLoop();
    const end = Math.min(n, start + SCORE_SLICE);
    const t0 = performance.now();
    for (let c = start; c < end; c++) {
      const off = c * dims;
      let s = 0;
      let d = 0;
      for (; d + 3 < dims; d += 4) {
        s +=
          (vecs[off + d] as number) * (q[d] as number) +
          (vecs[off + d + 1] as number) * (q[d + 1] as number) +
          (vecs[off + d + 2] as number) * (q[d + 2] as number) +
          (vecs[off + d + 3] as number) * (q[d + 3] as number);
      }
      for (; d < dims; d++) s += (vecs[off + d] as number) * (q[d] as number);
      const id = ids[c] as number;
      if (!beats(s, id, 0)) continue;
      // Insert, keeping the array sorted worst first.
      let j = 0;
      while (j + 1 < k && beats(s, id, j + 1)) {
        scores[j] = scores[j + 1] as number;
        which[j] = which[j + 1] as number;
        j++;
      }
      scores[j] = s;
      which[j] = id;
    }
    stats.longestSliceMs = Math.max(stats.longestSliceMs, performance.now() - t0);
  }
  const out: VectorHit[] = [];
  for (let j = k - 1; j >= 0; j--) {
    if (scores[j] === Number.NEGATIVE_INFINITY) continue;
    out.push({ id: String(which[j]), similarity: scores[j] as number });
  }
  return out;
}

/** One index per database handle (per server): two servers on one database are two nodes. */
const indexes = new WeakMap<object, VectorIndex>();

export function vectorIndexFor(db: object, em: () => EntityManager, budgetMb: number): VectorIndex {
  let idx = indexes.get(db);
  if (!idx) {
    idx = new VectorIndex(em, Math.max(0, budgetMb) * 1024 * 1024);
    indexes.set(db, idx);
  }
  return idx;
}
