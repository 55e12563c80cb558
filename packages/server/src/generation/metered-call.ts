import type { GenerationMeter } from '../metering/types.js';
import type {
  ChatRequest,
  ChatResult,
  ChatStreamPart,
  LlmProvider,
  LlmUsage,
  ToolCall,
} from '../providers/llm.js';
import { estimateTokens, messageChars } from '../providers/tokens.js';

/** How a metered generation ended, as its usage record says. */
export type GenerationStatus = 'success' | 'error' | 'aborted';

/** What a settlement returns when the meter settles it (`finish`); a caller's own settlement returns its own. */
export type Settled = { costMicros: number; short: boolean };

/**
 * A metered model call (issue 39): one or more calls of a generation to the model, fed to
 * their meter, and the meter settled once. App chat, the agents' turns, artifacts and RAG
 * answers all go through it; the meter comes already started (a hold admitted in the caller's
 * statement, `holdInStatement` / the agents' turn hold, or `startGeneration`), so the call
 * adds no statement of its own.
 *
 * - `events` / `stream` stream a reply: each text delta goes to the caller synchronously as it
 *   arrives, its characters are counted on the meter, which tops its hold up mid-stream when
 *   due (`check`: 402 `INSUFFICIENT_CREDITS` past the overdraft); tool calls are gathered and
 *   the usage the upstream reports is added to the meter as it arrives.
 * - `complete` makes one non-streamed call; a later call of the same generation (a repair
 *   round) first notes its prompt on the meter and re-checks the hold.
 * - `settle` settles the meter exactly once: by `meter.finish(status)`, or by the caller's
 *   own settlement (`via`: the statement that ends an app chat turn settles the hold with the
 *   turn's writes); every later settlement is a no-op. `release` gives the hold back whole
 *   (no call was made), `handOver` gives the meter to a caller that settles it later (an
 *   agent's final reply, settled beside the run's end).
 * - `metered` runs a body with the call and settles whatever happens: `success` (or `aborted`
 *   when the caller left meanwhile) after it returns, `error` or `aborted` when it throws,
 *   the whole hold back when no call was made. `events` settles `aborted` when its consumer
 *   stops iterating before the stream ended.
 *
 * A failure is `aborted` when the request's signal is (the caller went away: a disconnected
 * client, a cancelled run) or `abortedBy` says so, else `error`. Errors are thrown as the
 * provider and the meter throw them (`AppError`s from the table).
 */
export class MeteredCall {
  /** The text of the last streamed reply. */
  text = '';
  /** The tool calls of the last streamed reply. */
  toolCalls: ToolCall[] = [];
  /** The usage the upstream reported for the last call (already on the meter); undefined when none came. */
  usage: LlmUsage | undefined;
  /** Model calls started. */
  calls = 0;
  /** What `meter.finish` returned, once the call settled that way. */
  settlement: Settled | undefined;
  private done = false;

  constructor(
    private readonly llm: LlmProvider,
    /** Unmetered when absent (a runtime without metering). */
    readonly meter: GenerationMeter | undefined,
    readonly signal?: AbortSignal,
    /** A failure that counts as the caller gone though `signal` is not aborted (a run lost). */
    private readonly abortedBy?: (err: unknown) => boolean,
  ) {}

  /** True once settled, released or handed over. */
  get settled(): boolean {
    return this.done;
  }

  /** The status of a generation that failed with `err`. */
  failure(err: unknown): 'error' | 'aborted' {
    return this.signal?.aborted === true || this.abortedBy?.(err) === true ? 'aborted' : 'error';
  }

  private begin(req: Omit<ChatRequest, 'signal'>): ChatRequest {
    this.calls++;
    this.text = '';
    this.toolCalls = [];
    this.usage = undefined;
    return this.signal ? { ...req, signal: this.signal } : req;
  }

  /**
   * Streams a reply, yielding `toEvent(text)` per text delta (then counting it on the meter).
   * Returns when the reply ended; throws the upstream's or the meter's error unsettled (the
   * caller settles it, with `failure(err)`). A consumer that stops iterating settles the
   * meter `aborted`.
   */
  async *events<E>(req: Omit<ChatRequest, 'signal'>, toEvent: (text: string) => E): AsyncGenerator<E, void> {
    const meter = this.meter;
    let ended = false;
    try {
      for await (const part of this.llm.stream(this.begin(req))) {
        const text = this.take(part);
        if (!text) continue;
        yield toEvent(text);
        if (meter?.addStreamedChars(text.length)) await meter.check();
      }
      ended = true;
    } catch (err) {
      ended = true;
      throw err;
    } finally {
      // Stopped at a `yield`: the consumer left before the reply ended.
      if (!ended) await this.settle('aborted').catch(() => undefined);
    }
  }

  /**
   * Streams a reply to `onText` (awaited when it returns a promise), counting each delta on the
   * meter after it. Resolves when the reply ended; rejects unsettled, as `events`.
   */
  async stream(
    req: Omit<ChatRequest, 'signal'>,
    onText: (text: string) => void | Promise<void>,
  ): Promise<void> {
    const meter = this.meter;
    for await (const part of this.llm.stream(this.begin(req))) {
      const text = this.take(part);
      if (!text) continue;
      const pending = onText(text);
      if (pending) await pending;
      if (meter?.addStreamedChars(text.length)) await meter.check();
    }
  }

  /** Takes one part of the reply: a tool call or the usage (added to the meter), or text, returned ('' otherwise). */
  private take(part: ChatStreamPart): string {
    if (part.type === 'text') {
      if (part.text) this.text += part.text;
      return part.text ?? '';
    }
    if (part.type === 'tool_call') this.toolCalls.push(part.call);
    else if (part.type === 'usage') {
      this.usage = part.usage;
      this.meter?.addUsage(part.usage);
    }
    return '';
  }

  /**
   * One non-streamed call, its usage added to the meter. A later call of the generation first
   * notes its prompt (~4 characters a token) and re-checks the hold (402 when it cannot grow).
   */
  async complete(req: Omit<ChatRequest, 'signal'>): Promise<ChatResult> {
    if (this.calls > 0 && this.meter) {
      this.meter.beginCall(estimateTokens(messageChars(req.messages)));
      await this.meter.check();
    }
    const res = await this.llm.complete(this.begin(req));
    this.usage = res.usage;
    this.meter?.addUsage(res.usage);
    return res;
  }

  /**
   * Settles the meter once with `status`: by `via` when given (the caller's own settlement,
   * e.g. in its statement), else `meter.finish`. Later calls resolve to undefined.
   */
  settle(status: GenerationStatus): Promise<Settled | undefined>;
  settle<T>(status: GenerationStatus, via: (status: GenerationStatus) => Promise<T>): Promise<T | undefined>;
  async settle<T>(
    status: GenerationStatus,
    via?: (status: GenerationStatus) => Promise<T>,
  ): Promise<T | Settled | undefined> {
    if (this.done) return undefined;
    this.done = true;
    if (via) return via(status);
    this.settlement = await this.meter?.finish(status);
    return this.settlement;
  }

  /** Gives the hold back whole, no usage record (no call was made); a no-op once settled. */
  async release(): Promise<void> {
    if (this.done) return;
    this.done = true;
    await this.meter?.release();
  }

  /** The meter, for a caller that settles it later itself; nothing here settles it any more. */
  handOver(): GenerationMeter | undefined {
    this.done = true;
    return this.meter;
  }
}

/**
 * Runs `body` with `call` and settles the call whatever happens (unless `body` settled,
 * released or handed it over): after it returns, `success` (`aborted` when the caller left
 * meanwhile); when it throws, `failure(err)`; the whole hold back when no call was made. A
 * settlement that fails after `body` failed goes to `onSettleError` when given (the body's
 * error is thrown), else it is thrown in its place.
 */
export async function metered<T>(
  call: MeteredCall,
  body: (call: MeteredCall) => Promise<T>,
  onSettleError?: (err: unknown) => void,
): Promise<T> {
  let out: T;
  try {
    out = await body(call);
  } catch (err) {
    const settling = call.calls === 0 ? call.release() : call.settle(call.failure(err));
    if (onSettleError) await settling.catch(onSettleError);
    else await settling;
    throw err;
  }
  if (call.calls === 0) await call.release();
  else await call.settle(call.signal?.aborted ? 'aborted' : 'success');
  return out;
}
