/**
 * Limits in words: every schema property and parameter with a length, size, range or pattern
 * limit gets it in its `description` (where the description does not already state it). The
 * SDK's types are generated from this document and carry descriptions as JSDoc, so an editor
 * shows "1 to 2000 characters" on `message` instead of a bare `string`.
 */

type Schema = Record<string, unknown>;

/** zod's `int()` writes the safe-integer range as bounds: no limit a caller needs to know. */
const num = (v: unknown) => (typeof v === 'number' && Math.abs(v) < Number.MAX_SAFE_INTEGER ? v : undefined);
const fmt = (n: number) => (Math.abs(n) >= 10_000 ? n.toLocaleString('en-US') : String(n));

function range(min: number | undefined, max: number | undefined, unit: string): string | undefined {
  if (min !== undefined && max !== undefined) return `${fmt(min)} to ${fmt(max)}${unit}`;
  if (max !== undefined) return `at most ${fmt(max)}${unit}`;
  if (min === 1) return 'not empty';
  if (min !== undefined && min > 0) return `at least ${fmt(min)}${unit}`;
  return undefined;
}

/** The limits of one schema, in words; undefined when it has none. */
export function constraintText(s: Schema): string | undefined {
  const parts: string[] = [];
  const chars = range(num(s.minLength), num(s.maxLength), ' characters');
  if (chars) parts.push(chars);
  const items = range(num(s.minItems), num(s.maxItems), ' items');
  if (items) parts.push(items);
  const lo = num(s.minimum) ?? num(s.exclusiveMinimum);
  const hi = num(s.maximum) ?? num(s.exclusiveMaximum);
  if (lo !== undefined || hi !== undefined) {
    if (lo !== undefined && hi !== undefined) parts.push(`from ${fmt(lo)} to ${fmt(hi)}`);
    else if (hi !== undefined) parts.push(`at most ${fmt(hi)}`);
    else if (lo !== undefined) parts.push(`at least ${fmt(lo)}`);
  }
  if (typeof s.pattern === 'string') parts.push(`matching \`${s.pattern}\``);
  if (parts.length === 0) return undefined;
  const text = parts.join('; ');
  return `${text[0]?.toUpperCase()}${text.slice(1)}.`;
}

/** Appends the limits unless the description already gives every number in them. */
function describe(target: Schema, limits: string | undefined): void {
  if (!limits) return;
  const current = typeof target.description === 'string' ? target.description.trim() : '';
  const numbers = limits.match(/\d[\d,]*/g) ?? [];
  if (current && numbers.every((n) => current.includes(n))) return;
  target.description = current ? `${current}${/[.!?)`]$/.test(current) ? '' : '.'} ${limits}` : limits;
}

function walk(node: unknown, seen: Set<unknown>): void {
  if (!node || typeof node !== 'object' || seen.has(node)) return;
  seen.add(node);
  if (Array.isArray(node)) {
    for (const n of node) walk(n, seen);
    return;
  }
  const s = node as Schema;
  const props = s.properties as Record<string, Schema> | undefined;
  if (props && typeof props === 'object') {
    for (const prop of Object.values(props)) {
      // A property that is only a reference keeps the limits of the referenced schema there.
      if (prop && typeof prop === 'object' && !('$ref' in prop)) describe(prop, constraintText(prop));
    }
  }
  // Operation parameters: the limits sit on their schema; the SDK reads the parameter's description.
  if (Array.isArray(s.parameters)) {
    for (const p of s.parameters as Schema[]) {
      const schema = p?.schema as Schema | undefined;
      if (!schema || typeof schema !== 'object') continue;
      if (!p.description && typeof schema.description === 'string') p.description = schema.description;
      describe(p, constraintText(schema));
    }
  }
  for (const v of Object.values(s)) walk(v, seen);
}

/** Adds the limits to the descriptions of `doc` in place. */
export function describeConstraints(doc: unknown): void {
  walk(doc, new Set());
}
