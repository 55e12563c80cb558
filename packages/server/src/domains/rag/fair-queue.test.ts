import { describe, expect, it } from 'vitest';
import { FairQueue, WorkspaceQueueFullError } from './fair-queue.js';

/** The pool's scheduler on its own: the order slots are given in, and the cap of a workspace. */

const tick = () => new Promise((r) => setImmediate(r));

/** Queues `jobs` ([workspace, name]) in order; returns the order they get the (single) slot in. */
async function order(slots: number, jobs: [string, string][]): Promise<string[]> {
  const q = new FairQueue(slots, 100);
  const started: string[] = [];
  const running: (() => void)[] = [];
  for (const [ws, name] of jobs) {
    const ticket = await q.admit(ws, 'wait');
    void ticket.turn().then((giveBack) => {
      started.push(name);
      running.push(() => {
        giveBack();
        ticket.release();
      });
    });
  }
  await tick();
  while (running.length > 0) {
    running.shift()?.();
    await tick();
  }
  return started;
}

describe('the fair queue', () => {
  it('one slot: a workspace arriving behind another’s queue goes next, not last', async () => {
    const jobs: [string, string][] = [
      ['a', 'a1'],
      ['a', 'a2'],
      ['a', 'a3'],
      ['a', 'a4'],
      ['b', 'b1'],
    ];
    expect(await order(1, jobs)).toEqual(['a1', 'b1', 'a2', 'a3', 'a4']);
  });

  it('turns alternate between the workspaces that have jobs waiting', async () => {
    const jobs: [string, string][] = [
      ['a', 'a1'],
      ['a', 'a2'],
      ['a', 'a3'],
      ['b', 'b1'],
      ['b', 'b2'],
      ['c', 'c1'],
    ];
    expect(await order(1, jobs)).toEqual(['a1', 'b1', 'c1', 'a2', 'b2', 'a3']);
  });

  it('two slots: a workspace arriving while another holds both goes before its third', async () => {
    const jobs: [string, string][] = [
      ['a', 'a1'],
      ['a', 'a2'],
      ['a', 'a3'],
      ['b', 'b1'],
    ];
    expect(await order(2, jobs)).toEqual(['a1', 'a2', 'b1', 'a3']);
  });

  it('a workspace that arrives while another has had many turns is not owed them all', async () => {
    const q = new FairQueue(1, 100);
    const started: string[] = [];
    const give: (() => void)[] = [];
    const queue = async (ws: string, name: string) => {
      const t = await q.admit(ws, 'wait');
      void t.turn().then((g) =>
        give.push(() => {
          started.push(name);
          g();
          t.release();
        }),
      );
      await tick();
    };
    await queue('a', 'a1');
    await queue('a', 'a2');
    await queue('a', 'a3');
    // a1 and a2 run; then b arrives with three jobs: it goes first, then alternates with a.
    give.shift()?.();
    await tick();
    give.shift()?.();
    await tick();
    await queue('b', 'b1');
    await queue('b', 'b2');
    await queue('b', 'b3');
    await queue('a', 'a4');
    while (give.length > 0) {
      give.shift()?.();
      await tick();
    }
    expect(started).toEqual(['a1', 'a2', 'a3', 'b1', 'b2', 'a4', 'b3']);
  });

  it('the cap: refused past it, or waiting for a place', async () => {
    const q = new FairQueue(1, 2);
    const t1 = await q.admit('a', 'refuse');
    const t2 = await q.admit('a', 'refuse');
    const err = await q.admit('a', 'refuse').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkspaceQueueFullError);
    expect((err as Error).message).toBe(
      'The workspace already has 2 documents being processed; the limit is 2 at a time, try again when one is done',
    );
    // Another workspace is not held by a's cap.
    (await q.admit('b', 'refuse')).release();
    let third = false;
    const waiting = q.admit('a', 'wait').then((t) => {
      third = true;
      return t;
    });
    await tick();
    expect(third).toBe(false);
    t1.release();
    t1.release(); // once only
    const t3 = await waiting;
    expect(q.admitted('a')).toBe(2);
    t2.release();
    t3.release();
    expect(q.admitted('a')).toBe(0);
  });

  it('a job whose caller gives up while it waits for its turn leaves the queue', async () => {
    const q = new FairQueue(1, 10);
    const t1 = await q.admit('a', 'wait');
    const g1 = await t1.turn();
    const t2 = await q.admit('a', 'wait');
    const abort = new AbortController();
    const waiting = t2.turn(abort.signal).catch((e: unknown) => e);
    abort.abort(new Error('caller left'));
    expect(String(await waiting)).toContain('caller left');
    const t3 = await q.admit('b', 'wait');
    const next = t3.turn();
    g1();
    await next;
    expect(q.busy).toBe(1);
  });
});
