import { ERRORS, type ErrorDefinition } from './table.js';

/** The markers in docs/errors.md between which the generated table stands. */
export const TABLE_START = '<!-- error-table:start (generated from packages/server/src/errors/table.ts) -->';
export const TABLE_END = '<!-- error-table:end -->';

const cell = (s: string) => s.replace(/\|/g, '\\|');
const code = (s: string) => `\`${cell(s)}\``;

/** The error table as markdown: one row per error, by status then key. */
export function renderErrorTable(): string {
  const rows = (Object.entries(ERRORS) as [string, ErrorDefinition][])
    .sort(([ka, a], [kb, b]) => a.status - b.status || ka.localeCompare(kb))
    .map(([key, def]) => {
      const variants = Object.entries(def.variants ?? {})
        .map(([name, text]) => `; ${name}: ${code(text)}`)
        .join('');
      const headers = Object.entries(def.headers ?? {})
        .map(([h, v]) => `${h}: ${v}`)
        .join(', ');
      return [
        String(def.status),
        def.code ? code(def.code) : '',
        `${code(def.message)}${variants}`,
        headers ? code(headers) : '',
        code(key),
      ];
    });
  return alignTable(['Status', 'Code', 'Message (`error`)', 'Headers', 'Key'], rows);
}

/** A markdown table with every column padded to its widest cell (as `biome format` writes it). */
function alignTable(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(3, h.length, ...rows.map((r) => r[i]?.length ?? 0)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join(' | ')} |`;
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/** docs/errors.md with its generated section replaced by the current table. */
export function withErrorTable(doc: string): string {
  const start = doc.indexOf(TABLE_START);
  const end = doc.indexOf(TABLE_END);
  if (start < 0 || end < start)
    throw new Error(`docs/errors.md lacks the markers ${TABLE_START} … ${TABLE_END}`);
  return `${doc.slice(0, start + TABLE_START.length)}\n\n${renderErrorTable()}\n\n${doc.slice(end)}`;
}
