import { type HttpFixture, startHttpFixture } from './http-fixture.js';

/**
 * Fake web search upstreams speaking the Brave Search API (`GET /res/v1/web/search`,
 * `X-Subscription-Token`) and Tavily (`POST /search`, bearer key) wire formats. Results are
 * derived from the query, so tests can tell which provider answered.
 */
export async function startFakeSearch(opts: { apiKey?: string } = {}): Promise<HttpFixture> {
  const key = opts.apiKey ?? 'test-search-key';
  return startHttpFixture((req) => {
    const url = new URL(req.path, 'http://x');
    if (req.method === 'GET' && url.pathname === '/res/v1/web/search') {
      if (req.headers['x-subscription-token'] !== key) return { status: 401, body: { error: 'bad token' } };
      const q = url.searchParams.get('q') ?? '';
      const n = Number(url.searchParams.get('count') ?? 5);
      return {
        body: {
          type: 'search',
          web: {
            results: Array.from({ length: Math.min(n, 3) }, (_, i) => ({
              title: `Brave result ${i + 1} for ${q}`,
              url: `https://brave.example/${encodeURIComponent(q)}/${i + 1}`,
              description: `Snippet ${i + 1} about ${q}`,
            })),
          },
        },
      };
    }
    if (req.method === 'POST' && url.pathname === '/search') {
      if (req.headers.authorization !== `Bearer ${key}`) return { status: 401, body: { error: 'bad token' } };
      const q = String(req.body?.query ?? '');
      const n = Number(req.body?.max_results ?? 5);
      return {
        body: {
          query: q,
          results: Array.from({ length: Math.min(n, 3) }, (_, i) => ({
            title: `Tavily result ${i + 1} for ${q}`,
            url: `https://tavily.example/${encodeURIComponent(q)}/${i + 1}`,
            content: `Content ${i + 1} about ${q}`,
            score: 1 - i / 10,
          })),
        },
      };
    }
    return { status: 404, body: { error: 'not found' } };
  });
}

/** Server environment pointing both search providers at a fake. */
export function fakeSearchEnv(fake: { url: string }, apiKey = 'test-search-key'): Record<string, string> {
  return {
    BRAVE_SEARCH_API_KEY: apiKey,
    BRAVE_SEARCH_BASE_URL: fake.url,
    TAVILY_API_KEY: apiKey,
    TAVILY_BASE_URL: fake.url,
  };
}
