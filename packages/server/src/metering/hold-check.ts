/**
 * The mid-stream credit check of a generation (`GenerationMeter.check`, decision 0041): what
 * to do when the reply streamed so far, plus the next chunk of output, is more than its hold.
 *
 * - The hold is topped up to the cost so far plus the next chunk (`creditCheckEveryTokens` of
 *   output) from the free balance: the money other requests hold is not touched.
 * - When the free balance cannot, and the hold still covers what was streamed, the reply goes
 *   on within what was held: it is neither cut nor refused, and the next check is due when
 *   the output reaches what the hold pays for (`checkAtTokens`). A reply no longer than its
 *   hold (the expected reply the hold was sized for) therefore always completes once admitted.
 * - Only a reply that outgrows its hold is topped up into the overdraft (the balance may go
 *   below zero by at most one hold's worth, the spec's "checked again mid-stream for long
 *   generations"); when even that cannot cover it, it is refused (402).
 */
export interface HoldCheckInput {
  /** Micro-dollars this generation holds now. */
  held: number;
  /** Its cost so far. */
  costMicros: number;
  /** The price of the next chunk of output. */
  chunkMicros: number;
  /** Output tokens streamed so far. */
  outputTokens: number;
  /** The model's output price (micro-dollars per token). */
  outputPricePerMTok: number;
  /**
   * Adds `micros` to the hold in one conditional statement (true when the balance covered
   * it); `overdraft`: it may take the balance below zero by the generation's overdraft.
   */
  topUp(micros: number, usedMicros: number, overdraft: boolean): Promise<boolean>;
}

export interface HoldCheckResult {
  /** The reply outgrew its hold and the balance cannot top it up: 402. */
  refused: boolean;
  /** What the generation holds after the check. */
  held: number;
  /** Output tokens at which the next check is due (the hold running out), or +∞. */
  checkAtTokens: number;
}

export async function holdCheck(i: HoldCheckInput): Promise<HoldCheckResult> {
  const need = i.costMicros + i.chunkMicros;
  if (need <= i.held) return { refused: false, held: i.held, checkAtTokens: Number.POSITIVE_INFINITY };
  // What was streamed is still paid for by the hold (up to its last micro-dollar).
  const within = i.costMicros <= i.held;
  // Within the hold: the free balance only. Past it: into the overdraft too.
  if (await i.topUp(need - i.held, i.costMicros, !within)) {
    return { refused: false, held: need, checkAtTokens: Number.POSITIVE_INFINITY };
  }
  if (within) {
    const left =
      i.outputPricePerMTok > 0
        ? Math.floor((i.held - i.costMicros) / i.outputPricePerMTok)
        : Number.POSITIVE_INFINITY;
    return { refused: false, held: i.held, checkAtTokens: i.outputTokens + Math.max(1, left) };
  }
  return { refused: true, held: i.held, checkAtTokens: Number.POSITIVE_INFINITY };
}
