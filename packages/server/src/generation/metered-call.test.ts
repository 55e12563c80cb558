import { type FakeOpenAI, fakeOpenAIEnv, startFakeOpenAI } from '@ai-suite/testkit';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AppError, appError } from '../errors/index.js';
import type { GenerationMeter, StatementSettlement } from '../metering/types.js';
import { createHttpFetch } from '../providers/http-fetch.js';
import type { LlmUsage } from '../providers/llm.js';
import { loadModelCatalog } from '../providers/models.js';
import { OpenAiLlmProvider } from '../providers/openai-provider.js';
import { MeteredCall, metered } from './metered-call.js';

let fake: FakeOpenAI;
let llm: OpenAiLlmProvider;
let catalog: ReturnType<typeof loadModelCatalog>;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  catalog = loadModelCatalog(fakeOpenAIEnv(fake));
  llm = new OpenAiLlmProvider(catalog, { maxRetries: 0, timeoutMs: 5_000, fetch: createHttpFetch() });
});
afterAll(() => fake?.close());
beforeEach(() => fake.reset());

/**
 * A meter that records what the call does to it (the metering itself is tested in metering/):
 * every settlement is counted, so "exactly once" is seen even though a real meter's `finish`
 * is idempotent.
 */
class RecordingMeter implements GenerationMeter {
  inputTokens = 0;
  outputTokens = 0;
  chars = 0;
  checks = 0;
  begun: number[] = [];
  usages: LlmUsage[] = [];
  finished: string[] = [];
  released = 0;
  /** A check due every `checkEvery` characters; `refuse` makes the check a 402. */
  constructor(
    private readonly checkEvery = Number.POSITIVE_INFINITY,
    private readonly refuse = false,
  ) {}
  addUsage(usage: LlmUsage): void {
    this.usages.push(usage);
  }
  beginCall(inputTokens: number): void {
    this.begun.push(inputTokens);
  }
  addImages(): void {}
  addStreamedChars(chars: number): boolean {
    const before = Math.floor(this.chars / this.checkEvery);
    this.chars += chars;
    return Math.floor(this.chars / this.checkEvery) > before;
  }
  async check(): Promise<void> {
    this.checks++;
    if (this.refuse) throw appError('INSUFFICIENT_CREDITS');
  }
  costMicros(): number {
    return this.chars;
  }
  async release(): Promise<void> {
    this.released++;
  }
  settlementInStatement(): StatementSettlement | undefined {
    return undefined;
  }
  async finish(status: string): Promise<{ costMicros: number; short: boolean }> {
    this.finished.push(status);
    return { costMicros: this.chars, short: false };
  }
  /** Settlements of any kind. */
  get settlements(): number {
    return this.finished.length + this.released;
  }
}

const chat = () => catalog.resolve('chat');
const ask = () => ({ model: chat(), messages: [{ role: 'user' as const, content: 'hi' }] });
const settleTwice = async (call: MeteredCall) => {
  await call.settle('success');
  await call.settle('error');
};

describe('MeteredCall: one metered model call, settled exactly once', () => {
  it('streams the deltas, counts them on the meter, re-checks the hold when due and settles success once', async () => {
    fake.script({
      text: ['Hel', 'lo ', 'world'],
      paceMs: 5,
      usage: { prompt_tokens: 7, completion_tokens: 3 },
    });
    const meter = new RecordingMeter(4);
    const call = new MeteredCall(llm, meter);
    const events: { type: string; content: string }[] = [];
    await metered(call, async () => {
      for await (const ev of call.events(ask(), (content) => ({ type: 'token', content }))) events.push(ev);
    });
    await settleTwice(call);
    expect(events.map((e) => e.content)).toEqual(['Hel', 'lo ', 'world']);
    expect(call.text).toBe('Hello world');
    expect(meter.chars).toBe(11);
    expect(meter.checks).toBe(2);
    expect(meter.usages).toEqual([{ inputTokens: 7, outputTokens: 3, estimated: false }]);
    expect(call.usage).toEqual({ inputTokens: 7, outputTokens: 3, estimated: false });
    expect(meter.finished).toEqual(['success']);
    expect(meter.settlements).toBe(1);
    expect(call.settlement).toEqual({ costMicros: 11, short: false });
  });

  it('settles error once when the upstream fails mid-stream, the error thrown as the provider throws it', async () => {
    fake.script({ text: ['a', 'b', 'c', 'd'], failAfterChunks: 2 });
    const meter = new RecordingMeter();
    const call = new MeteredCall(llm, meter);
    const got: string[] = [];
    const err = await metered(call, () => call.stream(ask(), (t) => void got.push(t))).catch(
      (e: unknown) => e,
    );
    await settleTwice(call);
    expect(got.join('')).toBe('ab');
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).status).toBe(502);
    expect(meter.chars).toBe(2);
    expect(meter.usages).toEqual([]);
    expect(meter.finished).toEqual(['error']);
    expect(meter.settlements).toBe(1);
  });

  it("settles a mid-stream 402 (the hold could not grow) as error, the meter's error thrown", async () => {
    fake.script({ text: ['abcd', 'efgh', 'ijkl'], paceMs: 50 });
    const meter = new RecordingMeter(4, true);
    const call = new MeteredCall(llm, meter);
    const err = await metered(call, () => call.stream(ask(), () => {})).catch((e: unknown) => e);
    expect((err as AppError).code).toBe('INSUFFICIENT_CREDITS');
    expect(meter.checks).toBe(1);
    expect(meter.finished).toEqual(['error']);
    // The upstream request is given up with the stream.
    await expect.poll(() => fake.requests[0]?.aborted).toBe(true);
  });

  it('settles aborted once when the caller goes away mid-stream', async () => {
    fake.script({ text: ['a', 'b', 'c', 'd', 'e', 'f'], paceMs: 50 });
    const meter = new RecordingMeter();
    const ctrl = new AbortController();
    const call = new MeteredCall(llm, meter, ctrl.signal);
    const err = await metered(call, () =>
      call.stream(ask(), () => {
        ctrl.abort();
      }),
    ).catch((e: unknown) => e);
    await settleTwice(call);
    expect(err).toBeDefined();
    expect(meter.finished).toEqual(['aborted']);
    expect(meter.settlements).toBe(1);
  });

  it('counts a failure the caller says is an abort (a run lost) as aborted', async () => {
    fake.script({ text: ['a', 'b', 'c'], paceMs: 5 });
    class Gone extends Error {}
    const meter = new RecordingMeter();
    const call = new MeteredCall(llm, meter, undefined, (e) => e instanceof Gone);
    const err = await metered(call, () =>
      call.stream(ask(), () => {
        throw new Gone('run gone');
      }),
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Gone);
    expect(meter.finished).toEqual(['aborted']);
  });

  it('settles aborted once when the consumer stops iterating, and stops the upstream', async () => {
    fake.script({ text: ['a', 'b', 'c', 'd', 'e', 'f'], paceMs: 30 });
    const meter = new RecordingMeter();
    const call = new MeteredCall(llm, meter);
    for await (const ev of call.events(ask(), (t) => t)) {
      expect(ev).toBe('a');
      break;
    }
    expect(call.settled).toBe(true);
    await settleTwice(call);
    expect(meter.finished).toEqual(['aborted']);
    expect(meter.settlements).toBe(1);
    await expect.poll(() => fake.requests[0]?.aborted).toBe(true);
  });

  it("settles through the caller's own settlement once, never the meter's finish besides", async () => {
    fake.script({ text: 'reply' });
    const meter = new RecordingMeter();
    const call = new MeteredCall(llm, meter);
    const via: string[] = [];
    for await (const _ of call.events(ask(), (t) => t)) {
      // consumed
    }
    const out = await call.settle('success', async (s) => {
      via.push(s);
      return 'ended';
    });
    await call.settle('aborted');
    expect(out).toBe('ended');
    expect(via).toEqual(['success']);
    expect(meter.finished).toEqual([]);
  });

  it('gathers tool calls; a meter handed over is settled by nobody here', async () => {
    fake.script({ toolCalls: [{ id: 'call_a', name: 'lookup', arguments: '{"q":1}' }] });
    const meter = new RecordingMeter();
    const call = new MeteredCall(llm, meter);
    const handed = await metered(call, async () => {
      await call.stream(ask(), () => {});
      return call.handOver();
    });
    expect(handed).toBe(meter);
    expect(call.toolCalls).toEqual([{ id: 'call_a', name: 'lookup', arguments: '{"q":1}' }]);
    expect(meter.settlements).toBe(0);
  });

  it('completes; a second call notes its prompt and re-checks the hold first; success once', async () => {
    fake.script(
      { text: 'first', usage: { prompt_tokens: 5, completion_tokens: 1 } },
      { text: 'second', usage: { prompt_tokens: 9, completion_tokens: 2 } },
    );
    const meter = new RecordingMeter();
    const call = new MeteredCall(llm, meter);
    const texts = await metered(call, async () => {
      const a = await call.complete(ask());
      const b = await call.complete({
        model: chat(),
        messages: [
          ...ask().messages,
          { role: 'assistant', content: a.text },
          { role: 'user', content: 'again' },
        ],
      });
      return [a.text, b.text];
    });
    expect(texts).toEqual(['first', 'second']);
    expect(meter.begun).toEqual([Math.ceil('hifirstagain'.length / 4)]);
    expect(meter.checks).toBe(1);
    expect(meter.usages.map((u) => u.inputTokens)).toEqual([5, 9]);
    expect(meter.finished).toEqual(['success']);
  });

  it('gives the hold back whole when no call was made, whether the body returns or throws', async () => {
    const quiet = new RecordingMeter();
    await metered(new MeteredCall(llm, quiet), async () => 'nothing to ask');
    expect(quiet.released).toBe(1);
    expect(quiet.finished).toEqual([]);

    const failed = new RecordingMeter();
    const err = await metered(new MeteredCall(llm, failed), async () => {
      throw new Error('retrieval failed');
    }).catch((e: unknown) => e);
    expect((err as Error).message).toBe('retrieval failed');
    expect(failed.released).toBe(1);
    expect(failed.finished).toEqual([]);
  });

  it('hands a failing settlement after a failure to onSettleError, and throws the failure', async () => {
    fake.script({ error: { status: 400, message: 'bad input' } });
    const meter = new RecordingMeter();
    meter.finish = async () => {
      throw new Error('database gone');
    };
    const seen: unknown[] = [];
    const err = await metered(
      new MeteredCall(llm, meter),
      (call) => call.stream(ask(), () => {}),
      (e) => seen.push(e),
    ).catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 502, message: 'AI model error: bad input' });
    expect((seen[0] as Error).message).toBe('database gone');
  });
});
