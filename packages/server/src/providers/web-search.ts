/**
 * Web search for the `web_search` platform tool: two real providers, chosen per agent by
 * `capabilities.tools.web_provider` (`brave`, `tavily` or `both`). Base URLs are
 * configurable so tests and self-hosted proxies can stand in for the public endpoints.
 */
export interface SearchResult {
  title: string;
  url: string;
  snippet: string;
  provider: string;
}

export interface WebSearchProvider {
  id: 'brave' | 'tavily';
  search(query: string, maxResults: number, signal?: AbortSignal): Promise<SearchResult[]>;
}

export class SearchProviderError extends Error {
  override name = 'SearchProviderError';
}

const TIMEOUT_MS = 15_000;

function withTimeout(signal?: AbortSignal): AbortSignal {
  const t = AbortSignal.timeout(TIMEOUT_MS);
  return signal ? AbortSignal.any([signal, t]) : t;
}

/** Brave Search API: `GET /res/v1/web/search?q=…&count=…` with `X-Subscription-Token`. */
export class BraveSearch implements WebSearchProvider {
  readonly id = 'brave' as const;
  constructor(private readonly opts: { apiKey: string; baseUrl: string }) {}

  async search(query: string, maxResults: number, signal?: AbortSignal): Promise<SearchResult[]> {
    const url = new URL('/res/v1/web/search', this.opts.baseUrl);
    url.searchParams.set('q', query);
    url.searchParams.set('count', String(maxResults));
    const res = await fetch(url, {
      headers: { accept: 'application/json', 'x-subscription-token': this.opts.apiKey },
      signal: withTimeout(signal),
    });
    if (!res.ok) throw new SearchProviderError(`brave search failed: ${res.status}`);
    const body = (await res.json()) as {
      web?: { results?: { title?: string; url?: string; description?: string }[] };
    };
    return (body.web?.results ?? []).slice(0, maxResults).map((r) => ({
      title: r.title ?? '',
      url: r.url ?? '',
      snippet: r.description ?? '',
      provider: this.id,
    }));
  }
}

/** Tavily: `POST /search {query, max_results}` with a bearer key. */
export class TavilySearch implements WebSearchProvider {
  readonly id = 'tavily' as const;
  constructor(private readonly opts: { apiKey: string; baseUrl: string }) {}

  async search(query: string, maxResults: number, signal?: AbortSignal): Promise<SearchResult[]> {
    const res = await fetch(new URL('/search', this.opts.baseUrl), {
      method: 'POST',
      headers: {
        accept: 'application/json',
        'content-type': 'application/json',
        authorization: `Bearer ${this.opts.apiKey}`,
      },
      body: JSON.stringify({ query, max_results: maxResults }),
      signal: withTimeout(signal),
    });
    if (!res.ok) throw new SearchProviderError(`tavily search failed: ${res.status}`);
    const body = (await res.json()) as { results?: { title?: string; url?: string; content?: string }[] };
    return (body.results ?? []).slice(0, maxResults).map((r) => ({
      title: r.title ?? '',
      url: r.url ?? '',
      snippet: r.content ?? '',
      provider: this.id,
    }));
  }
}

/**
 * Providers configured in the environment: `BRAVE_SEARCH_API_KEY` (+ `BRAVE_SEARCH_BASE_URL`,
 * default https://api.search.brave.com) and `TAVILY_API_KEY` (+ `TAVILY_BASE_URL`, default
 * https://api.tavily.com).
 */
export function webSearchProvidersFromEnv(
  env: Record<string, string | undefined>,
): Map<string, WebSearchProvider> {
  const out = new Map<string, WebSearchProvider>();
  if (env.BRAVE_SEARCH_API_KEY) {
    out.set(
      'brave',
      new BraveSearch({
        apiKey: env.BRAVE_SEARCH_API_KEY,
        baseUrl: env.BRAVE_SEARCH_BASE_URL || 'https://api.search.brave.com',
      }),
    );
  }
  if (env.TAVILY_API_KEY) {
    out.set(
      'tavily',
      new TavilySearch({
        apiKey: env.TAVILY_API_KEY,
        baseUrl: env.TAVILY_BASE_URL || 'https://api.tavily.com',
      }),
    );
  }
  return out;
}

/** Searches with one provider or both (results interleaved, duplicates by URL dropped). */
export async function webSearch(
  providers: Map<string, WebSearchProvider>,
  which: 'brave' | 'tavily' | 'both',
  query: string,
  maxResults: number,
  signal?: AbortSignal,
): Promise<SearchResult[]> {
  const ids = which === 'both' ? ['brave', 'tavily'] : [which];
  const chosen = ids.map((id) => providers.get(id)).filter((p): p is WebSearchProvider => !!p);
  if (chosen.length === 0) throw new SearchProviderError(`Web search provider not configured: ${which}`);
  const lists = await Promise.all(chosen.map((p) => p.search(query, maxResults, signal)));
  const seen = new Set<string>();
  const out: SearchResult[] = [];
  for (let i = 0; out.length < maxResults && lists.some((l) => i < l.length); i++) {
    for (const l of lists) {
      const r = l[i];
      if (r && !seen.has(r.url) && out.length < maxResults) {
        seen.add(r.url);
        out.push(r);
      }
    }
  }
  return out;
}
