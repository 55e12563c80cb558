/**
 * Maps a request path to its route template (`/api/v1/managed-agents/sessions/{sessionId}/messages`)
 * from a list of templates, so `http_route` stays a bounded label. Exact templates are one map
 * look-up; templates with `{param}` segments are compared segment by segment, the one with the
 * most literal segments first. A path no template matches is `other`.
 */
export const OTHER_ROUTE = 'other';

export function routeMatcher(templates: Iterable<string>, prefixes: string[] = []): (path: string) => string {
  const exact = new Map<string, string>();
  const byLength = new Map<
    number,
    { segments: (string | undefined)[]; template: string; literals: number }[]
  >();
  for (const template of templates) {
    if (!template.includes('{')) {
      exact.set(template, template);
      continue;
    }
    const segments = template.split('/').map((s) => (s.startsWith('{') && s.endsWith('}') ? undefined : s));
    const list = byLength.get(segments.length) ?? [];
    list.push({ segments, template, literals: segments.filter((s) => s !== undefined).length });
    byLength.set(segments.length, list);
  }
  for (const list of byLength.values()) list.sort((a, b) => b.literals - a.literals);
  return (path: string) => {
    const hit = exact.get(path);
    if (hit) return hit;
    for (const p of prefixes) if (path === p || path.startsWith(`${p}/`)) return p;
    const parts = path.split('/');
    for (const r of byLength.get(parts.length) ?? []) {
      let ok = true;
      for (let i = 0; i < parts.length; i++) {
        const want = r.segments[i];
        if (want === undefined ? parts[i] === '' : want !== parts[i]) {
          ok = false;
          break;
        }
      }
      if (ok) return r.template;
    }
    return OTHER_ROUTE;
  };
}
