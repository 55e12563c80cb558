import { createRequire } from 'node:module';
import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { tracer } from './tracing.js';

interface PgClientLike {
  prototype: { query: (...args: unknown[]) => unknown };
}

const PATCHED = Symbol('aisuite pg spans');
const MAX_QUERY_TEXT = 2048;

/** The `pg` modules in use: the service's own and the one the ORM's driver loads. */
function pgModules(): { Client: PgClientLike }[] {
  const req = createRequire(import.meta.url);
  const found = new Set<{ Client: PgClientLike }>();
  const tryLoad = (load: () => { Client: PgClientLike }) => {
    try {
      found.add(load());
    } catch {
      // not installed where expected: nothing to patch there
    }
  };
  tryLoad(() => req('pg'));
  tryLoad(() => createRequire(req.resolve('@mikro-orm/postgresql'))('pg'));
  return [...found];
}

function describe(args: unknown[]): { text: string; name: string } {
  const first = args[0] as string | { text?: string } | undefined;
  const text = typeof first === 'string' ? first : typeof first?.text === 'string' ? first.text : '';
  const op = /^\s*(?:--[^\n]*\n\s*)*(\w+)/.exec(text)?.[1]?.toUpperCase() ?? 'QUERY';
  return { text: text.length > MAX_QUERY_TEXT ? `${text.slice(0, MAX_QUERY_TEXT)}…` : text, name: op };
}

/**
 * A client span (`pg.query:<OPERATION>`) around every `pg` query made while a span is active
 * (a request, a run); queries outside any trace (polling, heartbeats) make none. Attributes:
 * `db.system.name`, `db.operation.name`, `db.query.text` (the statement with its
 * placeholders, never the bound values), `db.namespace`, `server.address`, `server.port`.
 * Wraps `Client.prototype.query` of each `pg` module; returns the undo.
 */
export async function instrumentPg(): Promise<() => void> {
  const undo: (() => void)[] = [];
  for (const mod of pgModules()) {
    const proto = mod.Client.prototype as { query: (...args: unknown[]) => unknown; [PATCHED]?: boolean };
    if (proto[PATCHED]) continue;
    const original = proto.query;
    proto[PATCHED] = true;
    proto.query = function tracedQuery(this: Record<string, unknown>, ...args: unknown[]) {
      const t = tracer;
      const parent = context.active();
      if (!t || !trace.getSpan(parent)) return original.apply(this, args);
      const { text, name } = describe(args);
      const cp = this.connectionParameters as { database?: string; host?: string; port?: number } | undefined;
      const span = t.startSpan(
        `pg.query:${name}`,
        {
          kind: SpanKind.CLIENT,
          attributes: {
            'db.system.name': 'postgresql',
            'db.operation.name': name,
            'db.query.text': text,
            ...(cp?.database ? { 'db.namespace': cp.database } : {}),
            ...(cp?.host ? { 'server.address': cp.host } : {}),
            ...(cp?.port ? { 'server.port': cp.port } : {}),
          },
        },
        parent,
      );
      const end = (err?: unknown) => {
        if (err) {
          span.setStatus({
            code: SpanStatusCode.ERROR,
            message: err instanceof Error ? err.message : String(err),
          });
          span.setAttribute('error.type', (err as { code?: string }).code ?? 'Error');
        }
        span.end();
      };
      const last = args.length - 1;
      if (typeof args[last] === 'function') {
        const cb = args[last] as (err: unknown, res: unknown) => void;
        args[last] = (err: unknown, res: unknown) => {
          end(err);
          cb(err, res);
        };
        return original.apply(this, args);
      }
      let result: unknown;
      try {
        result = context.with(trace.setSpan(parent, span), () => original.apply(this, args));
      } catch (err) {
        end(err);
        throw err;
      }
      if (result && typeof (result as Promise<unknown>).then === 'function') {
        (result as Promise<unknown>).then(
          () => end(),
          (err) => end(err),
        );
      } else if (result && typeof (result as { once?: unknown }).once === 'function') {
        const ee = result as { once(ev: string, fn: (e?: unknown) => void): void };
        ee.once('end', () => end());
        ee.once('error', (e) => end(e));
      } else end();
      return result;
    };
    undo.push(() => {
      proto.query = original;
      delete proto[PATCHED];
    });
  }
  return () => {
    for (const u of undo) u();
  };
}
