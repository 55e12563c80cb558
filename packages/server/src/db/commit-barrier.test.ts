import { describe, expect, it } from 'vitest';
import { CommitBarrier } from './commit-barrier.js';

/** A barrier whose statements the test answers one by one. */
function controlled() {
  const pending: { resolve: () => void; reject: (e: Error) => void }[] = [];
  const barrier = new CommitBarrier(
    () =>
      new Promise<void>((resolve, reject) => {
        pending.push({ resolve, reject });
      }),
  );
  return { barrier, pending };
}

const settled = async (p: Promise<unknown>) => {
  let state = 'pending';
  p.then(
    () => {
      state = 'resolved';
    },
    () => {
      state = 'rejected';
    },
  );
  await new Promise((r) => setImmediate(r));
  return state;
};

describe('CommitBarrier (decision 0021 §43)', () => {
  it('answers a caller only with a barrier sent after its call; callers meanwhile share the next one', async () => {
    const { barrier, pending } = controlled();
    const first = barrier.wait();
    expect(barrier.count).toBe(1);
    // Asked while the first is on its way: the first may not cover them.
    const later = [barrier.wait(), barrier.wait(), barrier.wait()];
    expect(barrier.count).toBe(1);
    pending[0]?.resolve();
    expect(await settled(first)).toBe('resolved');
    expect(await settled(later[0] as Promise<void>)).toBe('pending');
    // The second barrier went out when the first answered, for all three.
    expect(barrier.count).toBe(2);
    pending[1]?.resolve();
    for (const p of later) expect(await settled(p)).toBe('resolved');
    // Nothing in flight: the next caller sends at once.
    const again = barrier.wait();
    expect(barrier.count).toBe(3);
    pending[2]?.resolve();
    await again;
  });

  it('fails the callers of a failed barrier, and serves the next ones', async () => {
    const { barrier, pending } = controlled();
    const first = barrier.wait();
    const second = barrier.wait();
    pending[0]?.reject(new Error('connection lost'));
    await expect(first).rejects.toThrow('connection lost');
    // The waiting one is sent regardless of the first's outcome.
    await new Promise((r) => setImmediate(r));
    expect(barrier.count).toBe(2);
    pending[1]?.resolve();
    await expect(second).resolves.toBeUndefined();
    const third = barrier.wait();
    pending[2]?.resolve();
    await expect(third).resolves.toBeUndefined();
  });
});
