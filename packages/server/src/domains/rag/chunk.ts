import { createHash } from 'node:crypto';

/** Target size of a chunk in characters (spec 8: about 1000). */
export const CHUNK_CHARS = 1000;

export interface Chunk {
  /** Position of the chunk in its document, from 0. */
  index: number;
  content: string;
  /** Page the text comes from (1 for documents without pages). Chunks never span pages. */
  page: number;
}

/** A piece of extracted text, in document order: prose (split on sentences) or records (kept whole). */
export interface Segment {
  page: number;
  text: string;
  /**
   * `prose`: split along sentence boundaries. `record`: one line of structured text (a CSV row
   * with its headers, a JSON key path) that is never split unless it alone exceeds a chunk.
   */
  kind: 'prose' | 'record';
}

const segmenter = new Intl.Segmenter('en', { granularity: 'sentence' });
const words = new Intl.Segmenter('en', { granularity: 'word' });

/**
 * The segments of `text`, found `window` characters at a time. Each step of an Intl.Segmenter
 * iteration costs time that grows with the length of the whole string: a CSV record of 200 KB
 * took 52 s to cut into words. The last segment of a window may go on past it, so it is
 * segmented again at the start of the next window; the boundaries are those of the whole text,
 * except in a run of more than `window` characters without one, which is cut at the window
 * (a multiple of the chunk size, so a word cut there is sliced as the whole word would be).
 */
export function* segmentsOf(seg: Intl.Segmenter, text: string, window: number): Generator<string> {
  let pos = 0;
  while (pos < text.length) {
    let end = pos + window;
    if (end >= text.length) {
      for (const s of seg.segment(pos === 0 ? text : text.slice(pos))) yield s.segment;
      return;
    }
    // Never split a surrogate pair.
    const code = text.charCodeAt(end - 1);
    if (code >= 0xd800 && code <= 0xdbff) end--;
    const part = text.slice(pos, end);
    let last: Intl.SegmentData | undefined;
    for (const s of seg.segment(part)) {
      if (last) yield last.segment;
      last = s;
    }
    if (last && last.index > 0) pos += last.index;
    else {
      yield part;
      pos = end;
    }
  }
}

/** Characters segmented at a time: at least 4096, a multiple of the chunk size. */
const windowFor = (max: number) => max * Math.ceil(4096 / max);

/** Cuts a piece longer than `max` at word boundaries (or hard, for one endless word). */
function splitLong(text: string, max: number, window: number): string[] {
  const out: string[] = [];
  let current = '';
  for (const segment of segmentsOf(words, text, window)) {
    if (current.length + segment.length > max && current.trim()) {
      out.push(current.trim());
      current = '';
    }
    let s = segment;
    while (s.length > max) {
      out.push(s.slice(0, max));
      s = s.slice(max);
    }
    current += s;
  }
  if (current.trim()) out.push(current.trim());
  return out;
}

/**
 * Packs segments into chunks of about `CHUNK_CHARS` characters: prose is split into sentences
 * (`Intl.Segmenter`), records stay whole, and a chunk never mixes pages. A sentence or record
 * longer than a chunk is cut at word boundaries. Streaming: segments arrive one at a time and
 * finished chunks are handed out as soon as they are full, so a large document never sits in
 * memory whole.
 */
export class Chunker {
  private parts: string[] = [];
  private size = 0;
  private page = 1;
  private next = 0;
  /** Text of a prose segment whose last sentence may continue in the next segment. */
  private carry = '';

  constructor(
    private readonly max = CHUNK_CHARS,
    /** Characters given to Intl.Segmenter at a time (`segmentsOf`); Infinity = the whole text. */
    private readonly window = windowFor(max),
  ) {}

  /** Adds one segment; returns the chunks it completed. */
  push(seg: Segment): Chunk[] {
    const out: Chunk[] = [];
    if (seg.page !== this.page) {
      this.flushCarry(out);
      this.emit(out);
      this.page = seg.page;
    }
    if (seg.kind === 'record') {
      this.flushCarry(out);
      this.addPiece(seg.text.trim(), '\n', out);
      return out;
    }
    // Prose: every sentence but the last is complete; the last may go on in the next segment.
    const text = this.carry + seg.text;
    const sentences = [...segmentsOf(segmenter, text, this.window)];
    this.carry = sentences.pop() ?? '';
    for (const s of sentences) this.addPiece(s.trim(), ' ', out);
    if (this.carry.length > this.max * 4) this.flushCarry(out);
    return out;
  }

  /** Ends the document: the remaining text becomes the last chunk. */
  end(): Chunk[] {
    const out: Chunk[] = [];
    this.flushCarry(out);
    this.emit(out);
    return out;
  }

  private flushCarry(out: Chunk[]) {
    const carry = this.carry.trim();
    this.carry = '';
    if (carry) this.addPiece(carry, ' ', out);
  }

  private addPiece(piece: string, joiner: string, out: Chunk[]) {
    if (!piece) return;
    if (piece.length > this.max) {
      for (const p of splitLong(piece, this.max, this.window)) this.addPiece(p, joiner, out);
      return;
    }
    const added = this.parts.length === 0 ? piece.length : piece.length + 1;
    if (this.size + added > this.max) this.emit(out);
    this.size += this.parts.length === 0 ? piece.length : piece.length + 1;
    this.parts.push(this.parts.length === 0 ? piece : joiner + piece);
  }

  private emit(out: Chunk[]) {
    if (this.parts.length === 0) return;
    out.push({ index: this.next++, content: this.parts.join(''), page: this.page });
    this.parts = [];
    this.size = 0;
  }
}

/** All chunks of a sequence of segments (small documents, tests). */
export function chunkSegments(segments: Iterable<Segment>, max = CHUNK_CHARS): Chunk[] {
  const c = new Chunker(max);
  const out: Chunk[] = [];
  for (const s of segments) out.push(...c.push(s));
  out.push(...c.end());
  return out;
}

/** What an interrupted indexing remembers of its last stored chunk, to resume after it. */
export const chunkHash = (c: Chunk) =>
  createHash('sha256').update(`${c.index}\u0000${c.page}\u0000${c.content}`).digest('base64url');
