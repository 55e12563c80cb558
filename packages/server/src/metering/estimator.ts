import { FirstReplyGate } from './first-reply.js';
import type { MeteringSettings } from './settings.js';

/** The estimator's key: replies are learned per model and capability (endpoint). */
export const estimatorKey = (modelId: string, endpoint: string) => `${modelId} ${endpoint}`;

/**
 * Expected reply lengths per model and capability, learned from recent complete replies: the 90th percentile
 * of the last 50 (the configured default until 3 were seen), capped. It sizes credit holds and
 * `/chat` quota reservations, so a burst admits about as many requests as the money or the
 * quota pays for (too small: admitted replies starve at their top-ups; too large: fewer
 * admitted than could be paid). In memory, per process: a restart relearns from the default.
 */
export class OutputEstimator {
  private readonly recent = new Map<string, number[]>();
  /** The first reply of each key: the requests that come while it is in flight wait for it. */
  readonly firstReplies: FirstReplyGate;

  constructor(
    private readonly settings: Pick<
      MeteringSettings,
      'defaultOutputTokens' | 'maxHoldOutputTokens' | 'firstReplyWaitMs'
    >,
  ) {
    this.firstReplies = new FirstReplyGate(
      (key) => (this.recent.get(key)?.length ?? 0) > 0,
      settings.firstReplyWaitMs ?? 0,
    );
  }

  /** Notes the output tokens of a complete reply (`key`: `estimatorKey(model, endpoint)`). */
  observe(key: string, outputTokens: number): void {
    if (!Number.isFinite(outputTokens) || outputTokens < 0) return;
    const list = this.recent.get(key) ?? [];
    this.recent.set(key, list);
    list.push(Math.ceil(outputTokens));
    if (list.length > 50) list.shift();
  }

  private readonly inputRatios = new Map<string, number[]>();

  /**
   * Notes how the upstream counted a prompt the service estimated at `estimated` tokens
   * (~4 characters per token): tokenisers differ by language and by what the upstream
   * counts (tool definitions, templates), so the hold's input part is corrected by it.
   */
  observeInput(key: string, estimated: number, reported: number): void {
    if (!(estimated > 0) || !(reported > 0)) return;
    const list = this.inputRatios.get(key) ?? [];
    this.inputRatios.set(key, list);
    list.push(reported / estimated);
    if (list.length > 50) list.shift();
  }

  /** Reported / estimated input tokens (90th percentile of the last 50; 1 until 3 were seen), within 0.1–10. */
  inputFactor(key: string): number {
    const list = this.inputRatios.get(key);
    if (!list || list.length < 3) return 1;
    const sorted = [...list].sort((a, b) => a - b);
    const f = sorted[Math.max(0, Math.ceil(sorted.length * 0.9) - 1)] as number;
    return Math.min(10, Math.max(0.1, f));
  }

  /**
   * Output tokens to hold for one reply: the 90th percentile of the recent replies once 3 were
   * seen; with 1 or 2 seen, twice the longest of them; with none, the
   * configured default. At most `maxTokens` and the cap.
   */
  expect(key: string, maxTokens?: number): number {
    const list = this.recent.get(key);
    let n = this.settings.defaultOutputTokens;
    if (list && list.length >= 3) {
      const sorted = [...list].sort((a, b) => a - b);
      n = sorted[Math.max(0, Math.ceil(sorted.length * 0.9) - 1)] as number;
    } else if (list && list.length > 0) {
      n = 2 * Math.max(...list);
    }
    n = Math.min(n, this.settings.maxHoldOutputTokens);
    if (maxTokens !== undefined && Number.isFinite(maxTokens) && maxTokens > 0) n = Math.min(n, maxTokens);
    return Math.max(1, Math.ceil(n));
  }
}
