import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { coalesceWindowMs, DEFAULT_COALESCE_MS, TextCoalescer, TextWindow } from './text-coalescer.js';

// Both windows run on fake timers (the clock they read included).
beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('TextCoalescer', () => {
  const collect = (windowMs: number) => {
    const out: string[] = [];
    const c = new TextCoalescer(windowMs, async (t) => {
      out.push(t);
    });
    return { out, c };
  };

  it('hands on the first piece at once and gathers the rest until the window ends', async () => {
    const { out, c } = collect(20);
    await c.push('a');
    expect(out).toEqual(['a']);
    vi.advanceTimersByTime(5);
    await c.push('b');
    vi.advanceTimersByTime(5);
    await c.push('c');
    expect(out).toEqual(['a']);
    vi.advanceTimersByTime(10); // 20 ms after 'a'
    expect(out).toEqual(['a', 'bc']);
    await c.push('d'); // inside the next window (opened by 'bc')
    expect(out).toEqual(['a', 'bc']);
    await c.flush();
    expect(out).toEqual(['a', 'bc', 'd']);
    // A quiet window later, the next piece goes out at once again.
    vi.advanceTimersByTime(50);
    await c.push('e');
    expect(out).toEqual(['a', 'bc', 'd', 'e']);
    await c.flush();
    expect(out.join('')).toBe('abcde');
  });

  it('with window 0 hands on every piece as it comes', async () => {
    const { out, c } = collect(0);
    for (const t of ['a', 'b', 'c']) await c.push(t);
    expect(out).toEqual(['a', 'b', 'c']);
  });

  it('discard drops what waits and stops the timer', async () => {
    const { out, c } = collect(20);
    await c.push('a');
    await c.push('b');
    c.discard();
    vi.advanceTimersByTime(100);
    await c.flush();
    expect(out).toEqual(['a']);
  });

  it('a failure of a hand-over made by the timer is thrown by the next call', async () => {
    let calls = 0;
    const c = new TextCoalescer(20, async () => {
      calls++;
      if (calls === 2) throw new Error('gone');
    });
    await c.push('a');
    await c.push('b');
    vi.advanceTimersByTime(20);
    await Promise.resolve();
    await expect(c.push('c')).rejects.toThrow('gone');
  });

  it('reads a window setting: ms from 0 up, anything else the default', () => {
    expect(coalesceWindowMs(undefined)).toBe(DEFAULT_COALESCE_MS);
    expect(coalesceWindowMs('0')).toBe(0);
    expect(coalesceWindowMs('35')).toBe(35);
    expect(coalesceWindowMs('-5')).toBe(DEFAULT_COALESCE_MS);
    expect(coalesceWindowMs('soon')).toBe(DEFAULT_COALESCE_MS);
    // A blank setting is no setting (it used to read as 0: no merging at all).
    expect(coalesceWindowMs('')).toBe(DEFAULT_COALESCE_MS);
    expect(coalesceWindowMs('  ')).toBe(DEFAULT_COALESCE_MS);
  });
});

describe('TextWindow', () => {
  const collect = (windowMs: number) => {
    const out: string[] = [];
    return { out, w: new TextWindow(windowMs, (t) => out.push(t)) };
  };

  it('writes the first piece at once, gathers the rest until the window ends, and writes nothing empty', () => {
    const { out, w } = collect(20);
    w.push('');
    expect(out).toEqual([]);
    w.push('a');
    expect(out).toEqual(['a']);
    vi.advanceTimersByTime(2);
    w.push('b');
    vi.advanceTimersByTime(2);
    w.push('c');
    expect(out).toEqual(['a']);
    vi.advanceTimersByTime(15); // 19 ms after 'a'
    expect(out).toEqual(['a']);
    vi.advanceTimersByTime(1);
    expect(out).toEqual(['a', 'bc']);
    // A quiet window later, the next piece goes out at once again.
    vi.advanceTimersByTime(25);
    w.push('d');
    expect(out).toEqual(['a', 'bc', 'd']);
    expect(w.take()).toBe('');
  });

  it('take hands over what waits and stops the timer: the caller sends it with the end', () => {
    const { out, w } = collect(20);
    w.push('a');
    w.push('b');
    w.push('c');
    expect(w.take()).toBe('bc');
    vi.advanceTimersByTime(100);
    expect(out).toEqual(['a']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('with a window of 0 every piece goes out as it comes', () => {
    const { out, w } = collect(0);
    for (const t of ['a', 'b', 'c']) w.push(t);
    expect(out).toEqual(['a', 'b', 'c']);
    expect(vi.getTimerCount()).toBe(0);
  });
});
