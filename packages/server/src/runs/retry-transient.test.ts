import { describe, expect, it } from 'vitest';
import { isTransientConflict, retryTransient } from './store.js';

describe('retryTransient', () => {
  const failing = (codes: (string | undefined)[]) => {
    let calls = 0;
    const run = async () => {
      const code = codes[calls++];
      if (code === undefined) return calls;
      throw Object.assign(new Error(`failed with ${code}`), { code });
    };
    return { run, calls: () => calls };
  };

  it('runs a deadlock victim or a serialization failure again, up to three times in all', async () => {
    const twice = failing(['40P01', '40001']);
    expect(await retryTransient(twice.run)).toBe(3);
    const always = failing(['40P01', '40P01', '40P01', '40P01']);
    await expect(retryTransient(always.run)).rejects.toThrow('failed with 40P01');
    expect(always.calls()).toBe(3);
  });

  it('throws anything else at once', async () => {
    const unique = failing(['23505']);
    await expect(retryTransient(unique.run)).rejects.toThrow('failed with 23505');
    expect(unique.calls()).toBe(1);
    expect(isTransientConflict({ code: '40P01' })).toBe(true);
    expect(isTransientConflict(new Error('x'))).toBe(false);
  });
});
