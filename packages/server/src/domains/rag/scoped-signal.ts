/**
 * A signal for one call that follows `parent` until `done()`: the call's listeners go on the
 * short-lived signal, not on the parent. The OpenAI client adds an `abort` listener to the
 * signal of every request and never removes it; given a run's signal for each embedding
 * batch, a long document left hundreds on it (MaxListenersExceededWarning past ten).
 */
export function scopedSignal(parent?: AbortSignal): { signal: AbortSignal | undefined; done: () => void } {
  if (!parent) return { signal: undefined, done: () => {} };
  const own = new AbortController();
  if (parent.aborted) {
    own.abort(parent.reason);
    return { signal: own.signal, done: () => {} };
  }
  const onAbort = () => own.abort(parent.reason);
  parent.addEventListener('abort', onAbort, { once: true });
  return { signal: own.signal, done: () => parent.removeEventListener('abort', onAbort) };
}
