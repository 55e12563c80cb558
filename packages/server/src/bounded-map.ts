/**
 * A `Map` that keeps at most `max` entries: setting a new key when full drops the oldest
 * inserted one. For per-process caches keyed by ids callers choose (e.g. the credit-hold
 * guesses of app chat and agent turns), so memory stays bounded whatever the traffic.
 */
export class BoundedMap<K, V> extends Map<K, V> {
  constructor(private readonly max: number) {
    super();
  }

  override set(key: K, value: V): this {
    if (this.size >= this.max && !this.has(key)) {
      const first = this.keys().next();
      if (!first.done) this.delete(first.value);
    }
    return super.set(key, value);
  }
}
