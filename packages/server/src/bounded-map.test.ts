import { describe, expect, it } from 'vitest';
import { BoundedMap } from './bounded-map.js';

describe('BoundedMap', () => {
  it('drops the oldest entry when a new key would pass the bound; updating a key drops nothing', () => {
    const m = new BoundedMap<string, number>(2);
    m.set('a', 1).set('b', 2);
    m.set('a', 3);
    expect([...m]).toEqual([
      ['a', 3],
      ['b', 2],
    ]);
    m.set('c', 4);
    expect([...m]).toEqual([
      ['b', 2],
      ['c', 4],
    ]);
  });
});
