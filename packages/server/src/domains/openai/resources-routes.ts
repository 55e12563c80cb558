import type { Request, Response } from 'express';
import { resolveApiKey } from '../../auth/api-keys.js';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { AppError, appError } from '../../errors/index.js';
import { type jsonReader, readJsonBody } from '../../http/json-body.js';
import { isAbortError } from '../../providers/abort.js';
import type { ModelInfo, ModelKind } from '../../providers/llm.js';
import { estimateTokens } from '../../providers/tokens.js';
import { isUuid } from '../agents/config.js';
import { type ImageProviders, ImageService } from '../image/service.js';
import type { ImageSettings } from '../image/settings.js';
import { AGENT_MODEL_PREFIX } from './chat-request.js';
import { sendOpenAiError } from './error-routes.js';
import { invalidRequest, modelNotFound, unsupported } from './errors.js';
import { type OpenAiRequest, requireApiKey } from './request.js';

export const EMBEDDINGS_ENDPOINT = '/openai/embeddings';
/** Most inputs one embeddings request may carry (OpenAI's own limit). */
export const MAX_EMBEDDING_INPUTS = 2048;

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);
const present = (v: unknown) => v !== undefined && v !== null;

/** The caller of a request on this surface: an API key, nothing else. */
export async function keyPrincipal(deps: ServerDeps, req: OpenAiRequest): Promise<Principal> {
  const principal = await resolveApiKey(deps.em(), requireApiKey(req));
  if (!principal) throw appError('INVALID_API_KEY');
  req.principal = principal;
  return principal;
}

/** An express handler whose errors are answered in OpenAI's shape. */
export const openAiRoute =
  (deps: ServerDeps, fn: (req: Request, res: Response, principal: Principal) => Promise<void>) =>
  async (req: Request, res: Response) => {
    try {
      await fn(req, res, await keyPrincipal(deps, req));
    } catch (err) {
      if (err instanceof AppError && err.status >= 500) deps.log.error({ err }, 'request failed');
      sendOpenAiError(res, err);
    }
  };

const OWNED_BY = 'ai-suite';
const STARTED = Math.floor(Date.now() / 1000);

function modelObject(m: ModelInfo) {
  return { id: m.id, object: 'model' as const, created: STARTED, owned_by: OWNED_BY };
}

type AgentListRow = { id: string; created_at: Date | string };

const agentObject = (a: AgentListRow) => ({
  id: `${AGENT_MODEL_PREFIX}${a.id}`,
  object: 'model' as const,
  created: Math.floor(new Date(a.created_at).getTime() / 1000),
  owned_by: 'workspace',
});

/** `GET /openai/models`: every active model of the catalog, then the workspace's agents. */
export async function listModels(deps: ServerDeps, principal: Principal) {
  const agents = await deps
    .em()
    .execute<AgentListRow[]>(
      `select id, created_at from apps where workspace_id = ? and app_type = 'agent' order by created_at, id`,
      [principal.workspaceId],
    );
  return {
    object: 'list' as const,
    data: [...deps.models.list().map(modelObject), ...agents.map(agentObject)],
  };
}

/** `GET /openai/models/{id}`: one of those; 404 `model_not_found` for anything else. */
export async function retrieveModel(deps: ServerDeps, principal: Principal, id: string) {
  if (id.startsWith(AGENT_MODEL_PREFIX)) {
    const agentId = id.slice(AGENT_MODEL_PREFIX.length);
    if (!isUuid(agentId)) throw modelNotFound(id);
    const rows = await deps
      .em()
      .execute<AgentListRow[]>(
        `select id, created_at from apps where id = ? and workspace_id = ? and app_type = 'agent'`,
        [agentId, principal.workspaceId],
      );
    if (!rows[0]) throw modelNotFound(id);
    return agentObject(rows[0]);
  }
  const m = deps.models.list().find((x) => x.id === id);
  if (!m) throw modelNotFound(id);
  return modelObject(m);
}

function modelOfKind(deps: ServerDeps, kind: ModelKind, id: unknown): ModelInfo {
  if (!present(id))
    throw invalidRequest('You must provide a model parameter.', 'model', 'missing_required_parameter');
  if (typeof id !== 'string')
    throw invalidRequest("Invalid type for 'model': expected a string.", 'model', 'invalid_type');
  const m = deps.models.list(kind).find((x) => x.id === id);
  if (!m) throw modelNotFound(id);
  return m;
}

function checkKeys(b: Obj, known: string[]): void {
  for (const k of Object.keys(b)) {
    if (!known.includes(k))
      throw invalidRequest(`Unrecognized request argument supplied: ${k}`, k, 'unknown_parameter');
  }
}

/** Float32 little-endian bytes in base64: OpenAI's `encoding_format: "base64"`. */
export function base64Embedding(vector: number[]): string {
  const buf = Buffer.alloc(vector.length * 4);
  for (let i = 0; i < vector.length; i++) buf.writeFloatLE(vector[i] as number, i * 4);
  return buf.toString('base64');
}

/**
 * `POST /openai/embeddings`: `input` a string or an array of strings (token arrays are
 * refused), `encoding_format` float or base64. Metered by credits as RAG's embeddings are: a
 * hold before the upstream call (429 `insufficient_quota` when the balance cannot cover it),
 * settled with one usage record.
 */
export async function createEmbeddings(
  deps: ServerDeps,
  principal: Principal,
  body: unknown,
  requestId: string,
  signal: AbortSignal,
) {
  if (!isObj(body)) throw invalidRequest('The request body must be a JSON object.', null, 'invalid_type');
  checkKeys(body, ['input', 'model', 'encoding_format', 'dimensions', 'user']);
  const raw = body.input;
  if (!present(raw))
    throw invalidRequest("Missing required parameter: 'input'.", 'input', 'missing_required_parameter');
  const inputs = typeof raw === 'string' ? [raw] : raw;
  if (!Array.isArray(inputs) || inputs.length === 0) {
    throw invalidRequest(
      "Invalid 'input': expected a non-empty string or a non-empty array of strings.",
      'input',
      'invalid_type',
    );
  }
  if (inputs.length > MAX_EMBEDDING_INPUTS) {
    throw invalidRequest(
      `Invalid 'input': at most ${MAX_EMBEDDING_INPUTS} inputs.`,
      'input',
      'array_above_max_length',
    );
  }
  inputs.forEach((s, i) => {
    const param = typeof raw === 'string' ? 'input' : `input[${i}]`;
    if (typeof s === 'number' || Array.isArray(s))
      throw unsupported(param, '(token arrays) is not supported: send text');
    if (typeof s !== 'string' || s === '')
      throw invalidRequest(`Invalid '${param}': expected a non-empty string.`, param, 'invalid_value');
  });
  const format = body.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64') {
    throw invalidRequest(
      "Invalid value for 'encoding_format': expected float or base64.",
      'encoding_format',
      'invalid_value',
    );
  }
  if (present(body.dimensions))
    throw unsupported('dimensions', "is not supported: the model's own dimensions are used");
  if (present(body.user) && typeof body.user !== 'string')
    throw invalidRequest("Invalid type for 'user'.", 'user', 'invalid_type');
  const model = modelOfKind(deps, 'embedding', body.model);
  const texts = inputs as string[];
  const meter = await deps.poolMetering.startGeneration(
    {
      workspaceId: principal.workspaceId,
      apiKeyId: principal.keyId ?? null,
      requestId,
      endpoint: EMBEDDINGS_ENDPOINT,
      model,
      meter: 'credits',
    },
    { inputTokens: estimateTokens(texts.reduce((n, t) => n + t.length, 0)) },
  );
  let status: 'success' | 'error' | 'aborted' = 'error';
  try {
    const out = await deps.llm.embed(model, texts, signal);
    meter.addUsage(out.usage);
    status = 'success';
    return {
      object: 'list' as const,
      model: model.id,
      data: out.vectors.map((v, index) => ({
        object: 'embedding' as const,
        index,
        embedding: format === 'base64' ? base64Embedding(v) : v,
      })),
      usage: { prompt_tokens: out.usage.inputTokens, total_tokens: out.usage.inputTokens },
    };
  } catch (err) {
    if (isAbortError(err) || signal.aborted) status = 'aborted';
    throw err;
  } finally {
    await meter
      .finish(status)
      .catch((err: unknown) => deps.log.error({ err, requestId }, 'recording embeddings usage failed'));
  }
}

/**
 * `POST /openai/images/generations`: one image (`n` 1) generated through the image capability
 * (`/image`'s models, credits and checks), answered as `b64_json` PNG.
 */
export async function generateImage(
  deps: ServerDeps,
  principal: Principal,
  body: unknown,
  ctx: { requestId: string; signal: AbortSignal; providers: ImageProviders; settings: ImageSettings },
) {
  if (!isObj(body)) throw invalidRequest('The request body must be a JSON object.', null, 'invalid_type');
  checkKeys(body, [
    'prompt',
    'model',
    'n',
    'size',
    'quality',
    'response_format',
    'style',
    'user',
    'background',
    'moderation',
    'output_format',
    'output_compression',
  ]);
  if (!present(body.prompt))
    throw invalidRequest("Missing required parameter: 'prompt'.", 'prompt', 'missing_required_parameter');
  if (typeof body.prompt !== 'string' || body.prompt.trim() === '') {
    throw invalidRequest("Invalid 'prompt': expected a non-empty string.", 'prompt', 'invalid_value');
  }
  if (body.prompt.length > 4000)
    throw invalidRequest("Invalid 'prompt': at most 4000 characters.", 'prompt', 'string_above_max_length');
  if (present(body.n) && body.n !== 1)
    throw unsupported('n', 'above 1 is not supported: one image per request');
  if (present(body.response_format) && body.response_format !== 'b64_json') {
    throw unsupported('response_format', '`url` is not supported: images are answered as b64_json');
  }
  if (present(body.size) && body.size !== 'auto')
    throw unsupported('size', "other than `auto` is not supported: the model's size is used");
  if (present(body.output_format) && body.output_format !== 'png')
    throw unsupported('output_format', 'other than `png` is not supported');
  for (const k of ['quality', 'style', 'background', 'moderation', 'output_compression']) {
    if (present(body[k]) && body[k] !== 'auto') throw unsupported(k);
  }
  if (present(body.user) && typeof body.user !== 'string')
    throw invalidRequest("Invalid type for 'user'.", 'user', 'invalid_type');
  const model = present(body.model) ? modelOfKind(deps, 'image', body.model) : undefined;
  const out = await new ImageService(
    deps.em(),
    deps,
    ctx.providers,
    ctx.settings,
    principal,
    ctx.requestId,
  ).run(
    { prompt: body.prompt, operation: 'generate', store: false, ...(model ? { model: model.id } : {}) },
    ctx.signal,
  );
  return {
    created: Math.floor(Date.now() / 1000),
    data: [{ b64_json: out.image as string, revised_prompt: out.prompt }],
    output_format: 'png',
  };
}

/** Reads a JSON body for these routes (errors in OpenAI's shape by the caller). */
export async function jsonBodyOf(
  reader: ReturnType<typeof jsonReader>,
  req: Request,
  res: Response,
): Promise<unknown> {
  const { body, error } = await readJsonBody(reader, req, res);
  if (error) throw error;
  return body;
}

export const abortedByClient = (err: unknown, signal: AbortSignal) => signal.aborted || isAbortError(err);
