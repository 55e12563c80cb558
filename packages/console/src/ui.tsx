import { type DependencyList, type ReactNode, useCallback, useEffect, useId, useRef, useState } from 'react';
import { errorMessage } from './api';

/** A page: its title as the one h1 (focused on arrival, so keyboard users start there). */
export function Page({
  title,
  actions,
  children,
}: {
  title: string;
  actions?: ReactNode;
  children: ReactNode;
}) {
  const h1 = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    document.title = `${title} · AI Suite console`;
    h1.current?.focus({ preventScroll: true });
  }, [title]);
  return (
    <section className="page" aria-labelledby="page-title">
      <header className="page-head">
        <h1 id="page-title" tabIndex={-1} ref={h1}>
          {title}
        </h1>
        {actions ? <div className="page-actions">{actions}</div> : null}
      </header>
      {children}
    </section>
  );
}

export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <p className="error" role="alert">
      {errorMessage(error)}
    </p>
  );
}

export interface Async<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload(): void;
}

/** Loads `fn()` when `deps` change; `reload()` loads again. */
export function useAsync<T>(fn: () => PromiseLike<T>, deps: DependencyList): Async<T> {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true });
  const [tick, setTick] = useState(0);
  // biome-ignore lint/correctness/useExhaustiveDependencies: deps are the caller's
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    Promise.resolve(fn()).then(
      (data) => live && setState({ data, loading: false }),
      (error: unknown) => live && setState({ error, loading: false }),
    );
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data: state.data, error: state.error, loading: state.loading, reload };
}

/** Runs an action, remembering whether it is busy and how it failed. */
export function useAction<A extends unknown[]>(fn: (...args: A) => Promise<unknown>) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const run = useCallback(
    async (...args: A) => {
      setBusy(true);
      setError(undefined);
      try {
        await fn(...args);
        return true;
      } catch (err) {
        setError(err);
        return false;
      } finally {
        setBusy(false);
      }
    },
    [fn],
  );
  return { run, busy, error, setError };
}

/** A labelled control: the label is tied to the control by id. */
export function Field({
  label,
  hint,
  children,
}: {
  label: string;
  hint?: string;
  children: (props: { id: string; 'aria-describedby'?: string }) => ReactNode;
}) {
  const id = useId();
  const hintId = hint ? `${id}-hint` : undefined;
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {children({ id, ...(hintId ? { 'aria-describedby': hintId } : {}) })}
      {hint ? (
        <small id={hintId} className="hint">
          {hint}
        </small>
      ) : null}
    </div>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p className="muted" role="status">
      Loading {what}…
    </p>
  );
}

export function formatUsd(v: string | number | null | undefined): string {
  if (v === null || v === undefined || v === '') return '—';
  const n = typeof v === 'number' ? v : Number(v);
  if (!Number.isFinite(n)) return String(v);
  return `$${n < 0.01 && n > 0 ? n.toFixed(6) : n.toFixed(n < 100 ? 4 : 2)}`;
}

export function formatNumber(v: number | string | null | undefined): string {
  if (v === null || v === undefined) return '—';
  return Number(v).toLocaleString('en-US');
}

export function formatDate(v: string | null | undefined): string {
  if (!v) return '—';
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? v : d.toISOString().replace('T', ' ').slice(0, 16);
}

export function CopyButton({ text, label = 'Copy' }: { text: string; label?: string }) {
  const [done, setDone] = useState<string | undefined>(undefined);
  return (
    <button
      type="button"
      className="secondary"
      onClick={async () => {
        try {
          await navigator.clipboard.writeText(text);
          setDone('Copied');
        } catch {
          // No clipboard outside a secure context (plain http on another host): say so.
          setDone('Copy failed: select the text');
        }
        setTimeout(() => setDone(undefined), 2500);
      }}
    >
      <span aria-live="polite">{done ?? label}</span>
    </button>
  );
}

/**
 * A table's box: it scrolls sideways when the table is wider than the screen, and is a named,
 * focusable region so keyboard users can scroll it and screen readers announce it.
 */
export function TableBox({ label, children }: { label: string; children: ReactNode }) {
  return (
    // biome-ignore lint/a11y/noNoninteractiveTabindex: a scrollable region must be focusable (WCAG 2.1.1)
    <section className="table-wrap" aria-label={label} tabIndex={0}>
      {children}
    </section>
  );
}
