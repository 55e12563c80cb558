import { BoundedMap } from '../../bounded-map.js';
import type { LlmProvider, ToolCallDelta } from '../../providers/llm.js';

type StreamResult = Awaited<ReturnType<LlmProvider['streamText']>>;
type Held = { text: string } | { tool: ToolCallDelta };

/**
 * A model call started while its request's admission statement is still running (decision
 * 0053): what the model yields is held here until `release` hands it to the response, or
 * dropped by `cancel` (the request was refused, or its client left) with the call aborted.
 * Nothing reaches the client before the admission has passed.
 */
export class EarlyCall {
  private held: Held[] = [];
  private onText: ((text: string) => void) | undefined;
  private onTool: ((delta: ToolCallDelta) => void) | undefined;
  private readonly result: Promise<StreamResult>;

  constructor(
    start: (onText: (text: string) => void, onTool: (delta: ToolCallDelta) => void) => Promise<StreamResult>,
    private readonly abort: () => void,
  ) {
    this.result = start(
      (text) => (this.onText ? this.onText(text) : this.held.push({ text })),
      (delta) => (this.onTool ? this.onTool(delta) : this.held.push({ tool: delta })),
    );
    // Observed by `release` or `cancel`; never an unhandled rejection in between.
    this.result.catch(() => undefined);
  }

  /**
   * Hands what was held, in order, then everything after it, to the response; the call's result.
   * A call that failed after yielding what is handed over here fails a turn of the event loop
   * later, once those writes have left: a response cut then has sent them, as it would have
   * had they come one by one from the network.
   */
  release(
    onText: (text: string) => void,
    onTool: (delta: ToolCallDelta) => void = () => {},
  ): Promise<StreamResult> {
    const held = this.held;
    this.held = [];
    for (const h of held) {
      if ('text' in h) onText(h.text);
      else onTool(h.tool);
    }
    this.onText = onText;
    this.onTool = onTool;
    if (held.length === 0) return this.result;
    return this.result.catch(async (err: unknown) => {
      await new Promise((resolve) => setImmediate(resolve));
      throw err;
    });
  }

  /** Aborts the call and drops what it yielded; resolves once it has ended. */
  async cancel(): Promise<void> {
    this.held = [];
    this.onText = () => {};
    this.onTool = () => {};
    this.abort();
    await this.result.catch(() => undefined);
  }
}

/** How long a key's last admission lets its next requests start the model call early. */
const WARM_MS = 30_000;

/**
 * The keys of this process whose last admission passed, with the rate-limit units that
 * admission left (`Infinity` without a limit) minus the requests started early since: a
 * request may start its model call before its own admission answers only while its key has
 * such units left. A refusal (401, 429, 403) forgets the key, so a revoked key or a spent
 * limit costs at most the early calls already in flight; a workspace with a token quota never
 * starts early (its reservation decides every request).
 */
export class WarmKeys {
  private readonly keys = new BoundedMap<string, { units: number; until: number }>(10_000);

  /** Whether a request of `keyHash` may start early (taking one of the key's units). */
  take(keyHash: string, now = Date.now()): boolean {
    const k = this.keys.get(keyHash);
    if (!k || k.until < now || k.units < 1) return false;
    k.units -= 1;
    return true;
  }

  /** An admission of `keyHash` passed, leaving `units` (`Infinity` without a limit). */
  admitted(keyHash: string, units: number, now = Date.now()): void {
    this.keys.set(keyHash, { units, until: now + WARM_MS });
  }

  forget(keyHash: string): void {
    this.keys.delete(keyHash);
  }
}
