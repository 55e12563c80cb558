import type { Router } from 'express';
import { z } from 'zod';
import { API_KEY } from '../../auth/authenticate.js';
import type { ServerDeps } from '../../context.js';
import { jsonReader } from '../../http/json-body.js';
import { securityFor } from '../../http/openapi-security.js';
import type { RawRouteModule } from '../../http/raw-routes.js';
import { ImageProviders } from '../image/service.js';
import { imageSettingsFromEnv } from '../image/settings.js';
import { completionsHandler } from './completions-routes.js';
import { sendOpenAiError } from './error-routes.js';
import { OpenAiError } from './errors.js';
import {
  abortedByClient,
  createEmbeddings,
  generateImage,
  jsonBodyOf,
  listModels,
  openAiRoute,
  retrieveModel,
} from './resources-routes.js';

/** Where the OpenAI-compatible surface lives under `/api/v1`: a client's `baseURL` ends here. */
export const OPENAI_BASE = '/openai';

const EMBEDDINGS_BODY_LIMIT = '4mb';

/** A request cut short by its caller: `gone` aborts, the answer is not written. */
function goneSignal(res: import('node:http').ServerResponse): AbortSignal {
  const gone = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) gone.abort();
  });
  return gone.signal;
}

const OpenAiErrorSchema = z
  .object({
    error: z.object({
      message: z.string(),
      type: z.string(),
      param: z.string().nullable(),
      code: z.string().nullable(),
    }),
  })
  .meta({ id: 'OpenAiError', description: "An error of the OpenAI-compatible surface, in OpenAI's shape." });

const errors = (statuses: Record<string, string>) =>
  Object.fromEntries(
    Object.entries(statuses).map(([status, description]) => [
      status,
      { description, content: { 'application/json': { schema: OpenAiErrorSchema } } },
    ]),
  );

const openApiJson = z.record(z.string(), z.unknown());
const security = securityFor(API_KEY);
const DOC = 'docs/openai-compatible.md';

/**
 * The OpenAI-compatible surface (decision 0047): `POST /openai/chat/completions` (also on the
 * HTTP server's fast path, as `/chat`), `GET /openai/models[/{id}]`, `POST /openai/embeddings`,
 * `POST /openai/images/generations`. API keys only; errors in OpenAI's shape.
 */
export const openAiRoutes: RawRouteModule = {
  name: 'openai',
  fast: [{ method: 'POST', path: `${OPENAI_BASE}/chat/completions`, handler: completionsHandler }],
  mount(router: Router, deps: ServerDeps) {
    const completions = completionsHandler(deps);
    router.post(`${OPENAI_BASE}/chat/completions`, (req, res) => completions(req, res));

    router.get(
      `${OPENAI_BASE}/models`,
      openAiRoute(deps, async (_req, res, principal) => {
        res.json(await listModels(deps, principal));
      }),
    );
    // `agent/<id>` as the client sends it: one segment percent-encoded, or two.
    router.get(
      `${OPENAI_BASE}/models/agent/:agentId`,
      openAiRoute(deps, async (req, res, principal) => {
        res.json(await retrieveModel(deps, principal, `agent/${String(req.params.agentId)}`));
      }),
    );
    router.get(
      `${OPENAI_BASE}/models/:id`,
      openAiRoute(deps, async (req, res, principal) => {
        res.json(await retrieveModel(deps, principal, String(req.params.id)));
      }),
    );

    const embeddingsBody = jsonReader(EMBEDDINGS_BODY_LIMIT);
    router.post(
      `${OPENAI_BASE}/embeddings`,
      openAiRoute(deps, async (req, res, principal) => {
        const signal = goneSignal(res);
        const body = await jsonBodyOf(embeddingsBody, req, res);
        try {
          res.json(await createEmbeddings(deps, principal, body, req.requestId ?? '', signal));
        } catch (err) {
          if (!abortedByClient(err, signal)) throw err;
        }
      }),
    );

    const settings = imageSettingsFromEnv(deps.config.env);
    const providers = new ImageProviders(deps, settings);
    const imageBody = jsonReader('64kb');
    router.post(
      `${OPENAI_BASE}/images/generations`,
      openAiRoute(deps, async (req, res, principal) => {
        const signal = goneSignal(res);
        const body = await jsonBodyOf(imageBody, req, res);
        try {
          res.json(
            await generateImage(deps, principal, body, {
              requestId: req.requestId ?? '',
              signal,
              providers,
              settings,
            }),
          );
        } catch (err) {
          if (!abortedByClient(err, signal)) throw err;
        }
      }),
    );

    // Anything else under the prefix: OpenAI's 404, not the native one.
    router.all(`${OPENAI_BASE}/*rest`, (req, res) => {
      sendOpenAiError(
        res,
        new OpenAiError(
          404,
          `Unknown request URL: ${req.method} ${req.originalUrl}`,
          'invalid_request_error',
          null,
          'unknown_url',
        ),
      );
    });
  },
  openapi: {
    [`${OPENAI_BASE}/chat/completions`]: {
      post: {
        tags: ['OpenAI-compatible'],
        summary:
          'Chat completions in OpenAI’s shapes (streamed or not); `agent/<agentId>` runs an agent turn',
        description: `OpenAI's request and response shapes; see ${DOC}. Metered as \`/chat\` (monthly token quota, \`chat\` rate limit); an agent model as a native turn (credits, \`agent_message\` rate limit; the session id in \`x-agent-session-id\`).`,
        security,
        requestBody: { required: true, content: { 'application/json': { schema: openApiJson } } },
        responses: {
          200: {
            description:
              '`chat.completion`, or with `stream: true` `chat.completion.chunk` events ending with `data: [DONE]`',
            content: {
              'application/json': { schema: openApiJson },
              'text/event-stream': { schema: z.string() },
            },
          },
          ...errors({
            400: '`invalid_request_error` naming `param`',
            401: '`invalid_api_key`',
            404: '`model_not_found`; `tool_call_not_found`',
            409: '`turn_in_progress` (agent models)',
            413: '`request_too_large`',
            429: '`rate_limit_exceeded` (`Retry-After`, `x-ratelimit-*`) or `insufficient_quota`',
            502: 'upstream model failure',
          }),
        },
      },
    },
    [`${OPENAI_BASE}/models`]: {
      get: {
        tags: ['OpenAI-compatible'],
        summary: 'Models the key may use, and the workspace’s agents as `agent/<agentId>`',
        security,
        responses: {
          200: {
            description: '`{object: "list", data: [{id, object: "model", created, owned_by}]}`',
            content: { 'application/json': { schema: openApiJson } },
          },
          ...errors({ 401: '`invalid_api_key`' }),
        },
      },
    },
    [`${OPENAI_BASE}/models/{id}`]: {
      get: {
        tags: ['OpenAI-compatible'],
        summary: 'One model or agent (`agent/<agentId>`, the slash percent-encoded or not)',
        security,
        requestParams: { path: z.object({ id: z.string() }) },
        responses: {
          200: {
            description: '`{id, object: "model", created, owned_by}`',
            content: { 'application/json': { schema: openApiJson } },
          },
          ...errors({ 401: '`invalid_api_key`', 404: '`model_not_found`' }),
        },
      },
    },
    [`${OPENAI_BASE}/embeddings`]: {
      post: {
        tags: ['OpenAI-compatible'],
        summary: 'Embeddings (`float` or `base64`), metered by credits',
        security,
        requestBody: { required: true, content: { 'application/json': { schema: openApiJson } } },
        responses: {
          200: {
            description: '`{object: "list", data: [{object: "embedding", index, embedding}], model, usage}`',
            content: { 'application/json': { schema: openApiJson } },
          },
          ...errors({
            400: '`invalid_request_error` naming `param`',
            401: '`invalid_api_key`',
            404: '`model_not_found`',
            429: '`insufficient_quota`',
            502: 'upstream failure',
          }),
        },
      },
    },
    [`${OPENAI_BASE}/images/generations`]: {
      post: {
        tags: ['OpenAI-compatible'],
        summary: 'One image through the image capability, answered as `b64_json` PNG',
        security,
        requestBody: { required: true, content: { 'application/json': { schema: openApiJson } } },
        responses: {
          200: {
            description: '`{created, data: [{b64_json, revised_prompt}]}`',
            content: { 'application/json': { schema: openApiJson } },
          },
          ...errors({
            400: '`invalid_request_error` naming `param`',
            401: '`invalid_api_key`',
            404: '`model_not_found`',
            429: '`insufficient_quota`',
            500: 'image generation failed',
          }),
        },
      },
    },
  },
};
