import { createRequire } from 'node:module';
import { context, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { tracer } from './tracing.js';

interface PgClientLike {
  prototype: { query: (...args: unknown[]) => unknown };
}

const PATCHED = Symbol('aisuite pg spans');

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

/** What a span says of one statement text: computed once per text (`statementOf`). */
export interface StatementInfo {
  /** The span name, `pg.query:<OPERATION>`. */
  name: string;
  /** `db.operation.name`: the statement's first keyword (`SELECT`, `INSERT`, `WITH`…). */
  operation: string;
  /** `db.query.summary`: the operations and tables in order of appearance (`SELECT api_keys UPDATE quota`). */
  summary: string;
}

const MAX_SUMMARY = 255;
const OPERATIONS = new Set(['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'MERGE', 'COPY', 'TRUNCATE']);
/** Keywords after which a table name comes (`FROM t`, `JOIN t`, `INTO t`, `UPDATE t`, `TABLE t`). */
const BEFORE_TABLE = new Set(['FROM', 'JOIN', 'INTO', 'UPDATE', 'TABLE']);
/** Words that may stand between such a keyword and its table. */
const SKIPPED = new Set(['ONLY', 'LATERAL', 'IF', 'NOT', 'EXISTS']);
/** Keywords before `UPDATE` or `FROM` that make it no operation or table (`FOR UPDATE`, `DO UPDATE`, `IS DISTINCT FROM`). */
const NOT_AN_OPERATION = new Set(['FOR', 'DO', 'KEY', 'SHARE', 'DISTINCT']);
/** Keywords that stand where a table could and are none. */
const NOT_A_TABLE = new Set(['SET', 'SELECT', 'VALUES', 'WITH', 'DEFAULT', 'WHERE']);

/**
 * `db.query.summary` of a statement (OpenTelemetry database conventions): its operations and the
 * tables they touch, in order of appearance, each once, at most 255 characters
 * (`WITH SELECT api_keys INSERT usage_records`). String literals and comments are skipped; a
 * name followed by `(` is a function, not a table.
 */
export function summarise(text: string): string {
  const bare = text.replace(/--[^\n]*|\/\*[\s\S]*?\*\/|'(?:[^']|'')*'/g, ' ');
  const parts: string[] = [];
  const seen = new Set<string>();
  let expectTable = false;
  let previous = '';
  for (const m of bare.matchAll(
    /"(?:[^"]|"")+"|[A-Za-z_][\w$]*(?:\.(?:"(?:[^"]|"")+"|[A-Za-z_][\w$]*))*|\(/g,
  )) {
    const token = m[0];
    const upper = token === '(' ? token : token.toUpperCase();
    const after = previous;
    previous = upper;
    if (expectTable) {
      if (SKIPPED.has(upper)) continue;
      expectTable = false;
      if (upper !== '(' && !NOT_A_TABLE.has(upper)) {
        // `FROM unnest(…)`: a function call, not a table.
        if (bare[(m.index ?? 0) + token.length] !== '(' && !seen.has(token)) {
          seen.add(token);
          parts.push(token);
        }
        continue;
      }
    }
    if (NOT_AN_OPERATION.has(after)) continue;
    if (OPERATIONS.has(upper) && parts[parts.length - 1] !== upper) parts.push(upper);
    if (BEFORE_TABLE.has(upper)) expectTable = true;
  }
  let summary = parts.join(' ');
  if (summary.length > MAX_SUMMARY) summary = summary.slice(0, summary.lastIndexOf(' ', MAX_SUMMARY));
  return summary;
}

/** Statement texts seen, with what their spans say: the service's statements are a bounded set. */
const statements = new Map<string, StatementInfo>();
/** Prepared statements by name (`PREPARE q_… AS …`), for the `EXECUTE q_…(…)` that run them. */
const prepared = new Map<string, StatementInfo>();
const MAX_STATEMENTS = 1000;

function remember<K>(map: Map<K, StatementInfo>, key: K, info: StatementInfo): StatementInfo {
  // Statements built with a variable number of placeholders could grow a cache: start over.
  if (map.size >= MAX_STATEMENTS) map.clear();
  map.set(key, info);
  return info;
}

/**
 * The span name, operation and summary of a statement text, from a cache after its first use.
 * `EXECUTE name(…)` (the embedded database's plain pool: values inlined as literals) is described
 * as the statement `PREPARE name AS …` prepared, by its name, so neither its values nor a
 * text per call reach the span or the cache.
 */
export function statementOf(text: string): StatementInfo {
  let info = statements.get(text);
  if (info) return info;
  const execute = /^EXECUTE\s+(\w+)/i.exec(text);
  if (execute) {
    const name = execute[1] as string;
    return (
      prepared.get(name) ?? { name: 'pg.query:EXECUTE', operation: 'EXECUTE', summary: `EXECUTE ${name}` }
    );
  }
  const operation = /^\s*(?:--[^\n]*\n\s*)*(\w+)/.exec(text)?.[1]?.toUpperCase() ?? 'QUERY';
  const prepare = operation === 'PREPARE' ? /^\s*PREPARE\s+(\w+)(?:\s*\([^)]*\))?\s+AS\s/i.exec(text) : null;
  if (prepare) {
    const inner = statementOf(text.slice(prepare[0].length));
    remember(prepared, prepare[1] as string, inner);
    info = { name: 'pg.query:PREPARE', operation, summary: `PREPARE ${inner.summary}`.slice(0, MAX_SUMMARY) };
  } else info = { name: `pg.query:${operation}`, operation, summary: summarise(text) || operation };
  return remember(statements, text, info);
}

/** The text of a `pg` query's arguments (`query(text, …)` or `query({ text, … }, …)`). */
function textOf(first: unknown): string {
  if (typeof first === 'string') return first;
  const text = (first as { text?: unknown } | undefined)?.text;
  return typeof text === 'string' ? text : '';
}

interface ConnectionParameters {
  database?: string;
  host?: string;
  port?: number;
}

/** Marks `span` failed with a driver error (`error.type`: the SQLSTATE) and ends it. */
function endFailed(span: Span, err: unknown): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
  span.setAttribute('error.type', (err as { code?: string } | undefined)?.code ?? 'Error');
  span.end();
}

/**
 * A client span (`pg.query:<OPERATION>`) around every `pg` query made while a recording span is
 * active (a sampled request or run); queries outside any trace (polling, heartbeats) or in an
 * unsampled one make none. Attributes: `db.system.name`, `db.operation.name`,
 * `db.query.summary` (operations and tables, `SELECT api_keys UPDATE quota`), `db.namespace`,
 * `server.address`, `server.port`; what depends on the statement text is computed once per
 * text. Bound values are never recorded. Wraps `Client.prototype.query` of each `pg` module;
 * returns the undo.
 */
export async function instrumentPg(): Promise<() => void> {
  const undo: (() => void)[] = [];
  for (const mod of pgModules()) {
    const proto = mod.Client.prototype as { query: (...args: unknown[]) => unknown; [PATCHED]?: boolean };
    if (proto[PATCHED]) continue;
    const original = proto.query;
    proto[PATCHED] = true;
    proto.query = function tracedQuery(
      this: { connectionParameters?: ConnectionParameters },
      ...args: unknown[]
    ) {
      const t = tracer;
      if (!t) return original.apply(this, args);
      const parent = context.active();
      if (!trace.getSpan(parent)?.isRecording()) {
        // A statement prepared outside a trace may be executed inside one: learn its name.
        const text = textOf(args[0]);
        if (text.startsWith('PREPARE ')) statementOf(text);
        return original.apply(this, args);
      }
      const info = statementOf(textOf(args[0]));
      const cp = this.connectionParameters;
      const span = t.startSpan(
        info.name,
        {
          kind: SpanKind.CLIENT,
          attributes: {
            'db.system.name': 'postgresql',
            'db.operation.name': info.operation,
            'db.query.summary': info.summary,
            'db.namespace': cp?.database || undefined,
            'server.address': cp?.host || undefined,
            'server.port': cp?.port || undefined,
          },
        },
        parent,
      );
      const last = args.length - 1;
      if (typeof args[last] === 'function') {
        const cb = args[last] as (err: unknown, res: unknown) => void;
        args[last] = (err: unknown, res: unknown) => {
          if (err) endFailed(span, err);
          else span.end();
          cb(err, res);
        };
        return original.apply(this, args);
      }
      let result: unknown;
      try {
        result = original.apply(this, args);
      } catch (err) {
        endFailed(span, err);
        throw err;
      }
      if (result && typeof (result as Promise<unknown>).then === 'function') {
        (result as Promise<unknown>).then(
          () => span.end(),
          (err) => endFailed(span, err),
        );
      } else if (result && typeof (result as { once?: unknown }).once === 'function') {
        const ee = result as { once(ev: string, fn: (e?: unknown) => void): void };
        ee.once('end', () => span.end());
        ee.once('error', (e) => endFailed(span, e));
      } else span.end();
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
