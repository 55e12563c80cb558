import { describe, expect, it } from 'vitest';
import type { LlmProvider, ToolCallDelta } from '../../providers/llm.js';
import { EarlyCall, WarmKeys } from './early-call.js';

type Result = Awaited<ReturnType<LlmProvider['streamText']>>;
const done = (textChars: number): Result => ({
  usage: { inputTokens: 1, outputTokens: 1, estimated: false },
  finishReason: 'stop',
  toolCalls: [],
  textChars,
});

/** A call driven by the test: `emit` yields text or a tool fragment, `end`/`fail` settle it. */
function drivenCall() {
  let onText: (t: string) => void = () => {};
  let onTool: (d: ToolCallDelta) => void = () => {};
  let settle: { end: (r: Result) => void; fail: (e: unknown) => void } | undefined;
  let aborted = false;
  const call = new EarlyCall(
    (t, d) => {
      onText = t;
      onTool = d;
      return new Promise<Result>((end, fail) => {
        settle = { end, fail };
      });
    },
    () => {
      aborted = true;
      settle?.fail(Object.assign(new Error('aborted'), { name: 'AbortError' }));
    },
  );
  return {
    call,
    text: (t: string) => onText(t),
    tool: (d: ToolCallDelta) => onTool(d),
    end: (r: Result) => settle?.end(r),
    fail: (e: unknown) => settle?.fail(e),
    aborted: () => aborted,
  };
}

describe('EarlyCall', () => {
  it('holds what the call yields until release, then hands it on in order, and what follows as it comes', async () => {
    const d = drivenCall();
    d.text('a');
    d.tool({ index: 0, id: 'c1', name: 'f' });
    d.text('b');
    const seen: string[] = [];
    const result = d.call.release(
      (t) => seen.push(`text:${t}`),
      (x) => seen.push(`tool:${x.name}`),
    );
    expect(seen).toEqual(['text:a', 'tool:f', 'text:b']);
    d.text('c');
    expect(seen.at(-1)).toBe('text:c');
    d.end(done(3));
    expect((await result).textChars).toBe(3);
  });

  it('cancel aborts the call and drops what it yielded; nothing is handed on', async () => {
    const d = drivenCall();
    d.text('secret');
    await d.call.cancel();
    expect(d.aborted()).toBe(true);
  });

  it('a call that failed while held fails after the held output was handed on, a turn of the loop later', async () => {
    const d = drivenCall();
    d.text('part');
    d.fail(new Error('upstream broke'));
    const seen: string[] = [];
    let immediate = false;
    setImmediate(() => {
      immediate = true;
    });
    const err = await d.call.release((t) => seen.push(t)).catch((e: unknown) => e);
    expect(seen).toEqual(['part']);
    expect((err as Error).message).toBe('upstream broke');
    expect(immediate).toBe(true);
  });
});

describe('WarmKeys', () => {
  it('lets a key start early only after an admission passed, as many times as it had units left', () => {
    const w = new WarmKeys();
    expect(w.take('k')).toBe(false);
    w.admitted('k', 2);
    expect([w.take('k'), w.take('k'), w.take('k')]).toEqual([true, true, false]);
    w.admitted('k', Number.POSITIVE_INFINITY);
    expect(Array.from({ length: 100 }, () => w.take('k')).every(Boolean)).toBe(true);
  });

  it('forgets a key on a refusal and after 30 s without an admission', () => {
    const w = new WarmKeys();
    w.admitted('k', 10, 1_000);
    expect(w.take('k', 2_000)).toBe(true);
    w.forget('k');
    expect(w.take('k', 2_000)).toBe(false);
    w.admitted('k', 10, 1_000);
    expect(w.take('k', 31_001)).toBe(false);
  });
});
