import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { enableMetrics } from './metrics.js';

const docs = new URL('../../../../docs/', import.meta.url);

/** Every series name the registry exposes (histograms as their `_bucket`, `_sum`, `_count`). */
async function exposedNames(): Promise<Set<string>> {
  const m = enableMetrics();
  const names = new Set<string>();
  for (const metric of await m.registry.getMetricsAsJSON()) {
    names.add(metric.name);
    if (String(metric.type) === 'histogram')
      for (const s of ['_bucket', '_sum', '_count']) names.add(`${metric.name}${s}`);
  }
  return names;
}

describe('the Grafana dashboard and the reference', () => {
  it('the dashboard queries only metrics the service exposes', async () => {
    const names = await exposedNames();
    const dash = JSON.parse(fs.readFileSync(new URL('grafana-dashboard.json', docs), 'utf8')) as {
      panels: { targets?: { expr: string }[] }[];
      templating: { list: { query?: unknown }[] };
    };
    const exprs = [
      ...dash.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr)),
      ...dash.templating.list.map((v) => (typeof v.query === 'string' ? v.query : '')),
    ];
    // A metric name stands before its selector `{…}` or as `label_values`'s first argument.
    const used = new Set(
      exprs.flatMap((e) =>
        [...e.matchAll(/([a-z_:][a-z0-9_:]*)(?=\{)|label_values\(([a-z_:][a-z0-9_:]*)/g)].map(
          (m) => (m[1] ?? m[2]) as string,
        ),
      ),
    );
    expect(used.size).toBeGreaterThan(15);
    for (const name of used) expect(names.has(name), name).toBe(true);
  });

  it('docs/observability.md lists every metric of the service', async () => {
    const text = fs.readFileSync(new URL('observability.md', docs), 'utf8');
    const m = enableMetrics();
    const own = (await m.registry.getMetricsAsJSON())
      .map((x) => x.name)
      .filter((n) => /^(?:http|gen_ai|aisuite)_/.test(n));
    expect(own.length).toBe(16);
    for (const name of own) expect(text, name).toContain(`\`${name}\``);
  });
});
