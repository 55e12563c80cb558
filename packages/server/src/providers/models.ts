import fs from 'node:fs';
import { z } from 'zod';
import { appError } from '../errors/index.js';
import type { ModelCatalog, ModelInfo, ModelKind } from './llm.js';

/** Where one provider's OpenAI-compatible endpoint lives. */
export interface ProviderConfig {
  id: string;
  /** `openai` (any OpenAI-compatible endpoint) or another adapter named by later capabilities. */
  type: string;
  baseUrl?: string;
  apiKey?: string;
  /** Free-form settings for non-OpenAI adapters (e.g. an image provider). */
  options: Record<string, unknown>;
}

const price = z.coerce.number().nonnegative().default(0);

const ModelsFileSchema = z.object({
  providers: z
    .array(
      z.object({
        id: z.string().min(1),
        type: z.string().default('openai'),
        baseUrl: z.string().url().optional(),
        apiKey: z.string().optional(),
        /** Name of an environment variable holding the key (keeps secrets out of the file). */
        apiKeyEnv: z.string().optional(),
        options: z.record(z.string(), z.unknown()).default({}),
      }),
    )
    .min(1),
  models: z.array(
    z.object({
      id: z.string().min(1),
      provider: z.string().min(1),
      upstream: z.string().min(1).optional(),
      kind: z.enum(['chat', 'embedding', 'image']).default('chat'),
      contextWindow: z.coerce.number().int().positive().default(128_000),
      inputPricePerMTok: price,
      outputPricePerMTok: price,
      pricePerImage: z.coerce.number().nonnegative().optional(),
      active: z.boolean().default(true),
      default: z.boolean().default(false),
    }),
  ),
});

export type ModelsFile = z.input<typeof ModelsFileSchema>;

export class ModelConfigError extends Error {
  override name = 'ModelConfigError';
}

/** The models the server can call, with one default per kind. */
export class StaticModelCatalog implements ModelCatalog {
  private readonly byId = new Map<string, ModelInfo>();
  private readonly defaults = new Map<ModelKind, string>();

  constructor(
    readonly models: ModelInfo[],
    readonly providers: ProviderConfig[],
    defaults: Partial<Record<ModelKind, string>> = {},
  ) {
    for (const m of models) {
      if (this.byId.has(m.id)) throw new ModelConfigError(`Duplicate model id "${m.id}"`);
      if (!providers.some((p) => p.id === m.provider)) {
        throw new ModelConfigError(`Model "${m.id}" names unknown provider "${m.provider}"`);
      }
      this.byId.set(m.id, m);
    }
    for (const kind of ['chat', 'embedding', 'image'] as const) {
      const named = defaults[kind];
      const first = models.find((m) => m.kind === kind && m.active);
      const id = named ?? first?.id;
      if (id) this.defaults.set(kind, id);
    }
  }

  resolve(kind: ModelKind, id?: string | null): ModelInfo {
    if (id !== undefined && id !== null && id !== '') {
      const m = this.byId.get(id);
      if (!m || m.kind !== kind || !m.active) {
        // The valid ids are no secret (GET /models lists them): say them, no guessing game.
        throw appError('INVALID_MODEL', {
          details: {
            model: id,
            kind,
            validModels: this.list(kind).map((v) => v.id),
          },
        });
      }
      return m;
    }
    const def = this.defaults.get(kind);
    const m = def ? this.byId.get(def) : undefined;
    if (!m) throw appError('NO_AI_MODEL_CONFIGURED');
    return m;
  }

  list(kind?: ModelKind): ModelInfo[] {
    return this.models.filter((m) => m.active && (kind === undefined || m.kind === kind));
  }

  defaultId(kind: ModelKind): string | undefined {
    return this.defaults.get(kind);
  }

  provider(id: string): ProviderConfig | undefined {
    return this.providers.find((p) => p.id === id);
  }
}

const num = (v: string | undefined, name: string, fallback: number): number => {
  if (v === undefined || v.trim() === '') return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new ModelConfigError(`${name} must be a non-negative number`);
  return n;
};

/**
 * Reads the model configuration: `MODELS_FILE` (JSON, several providers and models) or the
 * single-provider variables `OPENAI_BASE_URL` / `OPENAI_API_KEY` / `CHAT_MODEL` (+ optional
 * `EMBEDDING_MODEL`, prices, context window). With neither, the catalog is empty and every AI
 * endpoint answers 503 `No AI model configured`.
 */
export function loadModelCatalog(env: Record<string, string | undefined>): StaticModelCatalog {
  const file = env.MODELS_FILE?.trim();
  if (file) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (err) {
      throw new ModelConfigError(`MODELS_FILE ${file}: ${(err as Error).message}`);
    }
    const r = ModelsFileSchema.safeParse(parsed);
    if (!r.success) {
      const lines = r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
      throw new ModelConfigError(`MODELS_FILE ${file}: ${lines}`);
    }
    const providers: ProviderConfig[] = r.data.providers.map((p) => ({
      id: p.id,
      type: p.type,
      baseUrl: p.baseUrl,
      apiKey: p.apiKey ?? (p.apiKeyEnv ? env[p.apiKeyEnv] : undefined),
      options: p.options,
    }));
    const models: ModelInfo[] = r.data.models.map((m) => ({
      id: m.id,
      upstream: m.upstream ?? m.id,
      provider: m.provider,
      kind: m.kind,
      contextWindow: m.contextWindow,
      inputPricePerMTok: m.inputPricePerMTok,
      outputPricePerMTok: m.outputPricePerMTok,
      ...(m.pricePerImage !== undefined ? { pricePerImage: m.pricePerImage } : {}),
      active: m.active,
    }));
    const defaults: Partial<Record<ModelKind, string>> = {};
    for (const m of r.data.models) if (m.default && m.active) defaults[m.kind] ??= m.id;
    return new StaticModelCatalog(models, providers, defaults);
  }

  const chat = env.CHAT_MODEL?.trim();
  const embedding = env.EMBEDDING_MODEL?.trim();
  const image = imageModelsFromEnv(env);
  if (!chat && !embedding && image.models.length === 0) return new StaticModelCatalog([], []);
  const provider: ProviderConfig = {
    id: 'default',
    type: 'openai',
    baseUrl: env.OPENAI_BASE_URL?.trim() || undefined,
    apiKey: env.OPENAI_API_KEY?.trim() || undefined,
    options: {},
  };
  const models: ModelInfo[] = [];
  if (chat) {
    models.push({
      id: env.CHAT_MODEL_ID?.trim() || chat,
      upstream: chat,
      provider: 'default',
      kind: 'chat',
      contextWindow: num(env.CHAT_MODEL_CONTEXT_WINDOW, 'CHAT_MODEL_CONTEXT_WINDOW', 128_000),
      inputPricePerMTok: num(env.CHAT_MODEL_INPUT_PRICE_PER_MTOK, 'CHAT_MODEL_INPUT_PRICE_PER_MTOK', 0),
      outputPricePerMTok: num(env.CHAT_MODEL_OUTPUT_PRICE_PER_MTOK, 'CHAT_MODEL_OUTPUT_PRICE_PER_MTOK', 0),
      active: true,
    });
  }
  if (embedding) {
    models.push({
      id: env.EMBEDDING_MODEL_ID?.trim() || embedding,
      upstream: embedding,
      provider: 'default',
      kind: 'embedding',
      contextWindow: num(env.EMBEDDING_MODEL_CONTEXT_WINDOW, 'EMBEDDING_MODEL_CONTEXT_WINDOW', 8_192),
      inputPricePerMTok: num(env.EMBEDDING_MODEL_PRICE_PER_MTOK, 'EMBEDDING_MODEL_PRICE_PER_MTOK', 0),
      outputPricePerMTok: 0,
      active: true,
    });
  }
  models.push(...image.models);
  return new StaticModelCatalog(models, [provider, ...image.providers]);
}

/**
 * Image models from the environment (docs/image.md): `IMAGE_MODEL` on Replicate
 * (`REPLICATE_API_TOKEN`, `REPLICATE_BASE_URL`) and `IMAGE_ALT_MODEL` on an OpenAI-compatible
 * images API (`IMAGE_ALT_BASE_URL` / `IMAGE_ALT_API_KEY`, defaulting to the `OPENAI_*` ones).
 */
function imageModelsFromEnv(env: Record<string, string | undefined>): {
  models: ModelInfo[];
  providers: ProviderConfig[];
} {
  const models: ModelInfo[] = [];
  const providers: ProviderConfig[] = [];
  const opt = (v: string | undefined) => v?.trim() || undefined;
  const replicate = opt(env.IMAGE_MODEL);
  if (replicate) {
    providers.push({
      id: 'replicate',
      type: 'replicate',
      baseUrl: opt(env.REPLICATE_BASE_URL),
      apiKey: opt(env.REPLICATE_API_TOKEN),
      options: {},
    });
    models.push({
      id: opt(env.IMAGE_MODEL_ID) ?? replicate,
      upstream: replicate,
      provider: 'replicate',
      kind: 'image',
      contextWindow: 0,
      inputPricePerMTok: 0,
      outputPricePerMTok: 0,
      pricePerImage: num(env.IMAGE_MODEL_PRICE_PER_IMAGE, 'IMAGE_MODEL_PRICE_PER_IMAGE', 0),
      active: true,
    });
  }
  const alt = opt(env.IMAGE_ALT_MODEL);
  if (alt) {
    providers.push({
      id: 'openai-images',
      type: 'openai',
      baseUrl: opt(env.IMAGE_ALT_BASE_URL) ?? opt(env.OPENAI_BASE_URL),
      apiKey: opt(env.IMAGE_ALT_API_KEY) ?? opt(env.OPENAI_API_KEY),
      options: {},
    });
    models.push({
      id: opt(env.IMAGE_ALT_MODEL_ID) ?? alt,
      upstream: alt,
      provider: 'openai-images',
      kind: 'image',
      contextWindow: 0,
      inputPricePerMTok: num(env.IMAGE_ALT_INPUT_PRICE_PER_MTOK, 'IMAGE_ALT_INPUT_PRICE_PER_MTOK', 0),
      outputPricePerMTok: num(env.IMAGE_ALT_OUTPUT_PRICE_PER_MTOK, 'IMAGE_ALT_OUTPUT_PRICE_PER_MTOK', 0),
      pricePerImage: num(env.IMAGE_ALT_MODEL_PRICE_PER_IMAGE, 'IMAGE_ALT_MODEL_PRICE_PER_IMAGE', 0),
      active: true,
    });
  }
  return { models, providers };
}
