import type { AgentConfig } from './schema.js';

/** The documented platform defaults every agent config is merged over (docs/agents.md). */
export const AGENT_CONFIG_DEFAULTS: AgentConfig = {
  platformVersion: 2,
  kind: 'agent',
  runtimeMode: 'assist',
  capabilities: {
    memory: { enabled: false, scope: 'agent' },
    deliverables: { enabled: false },
    tools: { web_search: false, web_fetch: false, web_provider: 'brave' },
    mcp_servers: [],
  },
  compute: { maxIterations: 8, maxWallClockMs: 120_000 },
  customTools: [],
  toolApproval: [],
};

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Objects merge key by key, recursively; arrays and scalars in `patch` replace. */
export function deepMerge<T>(base: T, patch: unknown): T {
  if (!isPlainObject(base) || !isPlainObject(patch)) return (patch === undefined ? base : patch) as T;
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (v === undefined) continue;
    out[k] = isPlainObject(out[k]) && isPlainObject(v) ? deepMerge(out[k], v) : v;
  }
  return out as T;
}

/** A copy of JSON data (plain objects, arrays, scalars): cheaper than `structuredClone`. */
const cloneJson = <T>(v: T): T =>
  (Array.isArray(v)
    ? v.map(cloneJson)
    : isPlainObject(v)
      ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, cloneJson(x)]))
      : v) as T;

/** The effective config of an agent: defaults, then what is stored. */
export function effectiveConfig(stored: unknown): AgentConfig {
  return deepMerge(cloneJson(AGENT_CONFIG_DEFAULTS), stored ?? {});
}

export const isUuid = (s: string) =>
  /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s);
