import type { Config } from '../config.js';
import { genAiObserved } from '../telemetry/genai.js';
import { createHttpFetch } from './http-fetch.js';
import { InstrumentedLlmProvider } from './instrumented-llm.js';
import { loadModelCatalog } from './models.js';
import { OpenAiLlmProvider } from './openai-provider.js';

const nonNegInt = (v: string | undefined, name: string, fallback: number) => {
  if (v === undefined || v.trim() === '') return fallback;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer`);
  return n;
};

/** The model catalog and the LLM provider, from the configuration. */
export function createAiDeps(config: Config) {
  const models = loadModelCatalog(config.env);
  // Model calls observed (spans, gen_ai_* metrics) only when telemetry is on.
  const Llm = genAiObserved() ? InstrumentedLlmProvider : OpenAiLlmProvider;
  const llm = new Llm(models, {
    maxRetries: nonNegInt(config.env.LLM_MAX_RETRIES, 'LLM_MAX_RETRIES', 1),
    timeoutMs: Math.max(1, nonNegInt(config.env.LLM_TIMEOUT_MS, 'LLM_TIMEOUT_MS', 60_000)),
    // Embeddings are batch work (document indexing): worth more patience than a chat turn.
    embeddingMaxRetries: nonNegInt(config.env.EMBEDDING_MAX_RETRIES, 'EMBEDDING_MAX_RETRIES', 4),
    // `LLM_HTTP_CLIENT=fetch`: everything, streams included, through the SDK on the global fetch.
    fetch: config.env.LLM_HTTP_CLIENT === 'fetch' ? undefined : createHttpFetch(),
    streaming: config.env.LLM_HTTP_CLIENT === 'fetch' ? 'sdk' : 'node',
  });
  return { models, llm };
}
