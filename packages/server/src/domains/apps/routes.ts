import type { Request, Response } from 'express';
import { bearerToken, isWellFormedApiKey } from '../../auth/api-keys.js';
import { API_KEY_OR_WIDGET, authenticate } from '../../auth/authenticate.js';
import { isSessionToken } from '../../auth/sessions.js';
import { WIDGET_TOKEN_PREFIX } from '../../auth/widget-tokens.js';
import type { ServerDeps } from '../../context.js';
import { type AppError, appError, validationError } from '../../errors/index.js';
import { ErrorBodySchema, sendError, toAppError } from '../../http/errors.js';
import { jsonBodyParser } from '../../http/json-body.js';
import { securityFor } from '../../http/openapi-security.js';
import type { RawRouteModule } from '../../http/raw-routes.js';
import { SseWriter } from '../../http/sse.js';
import { coalesceWindowMs, TextCoalescer } from '../../runs/text-coalescer.js';
import { type AppChatCaller, AppChatService, appChatDeps } from './chat.js';
import { appsCors } from './cors.js';
import { ChatMessageInput, ChatStreamEventSchema } from './schema.js';

export const STREAM_PATH = '/apps/{appId}/chat/message/stream';
const HEARTBEAT_MS = 15_000;

/**
 * `POST /apps/{appId}/chat/message/stream` (spec 4.6 / 6.2). Everything that can fail before
 * the model is called answers with a JSON error status; after that, failures are `error` events.
 */
async function chatStream(deps: ServerDeps, coalesceMs: number, req: Request, res: Response) {
  let sse: SseWriter | undefined;
  try {
    // An API key is resolved by the admission statement itself; widget tokens (and the web
    // console's session) authenticate first.
    const token = bearerToken(req.headers.authorization);
    let caller: AppChatCaller;
    if (
      !req.consoleApi &&
      !req.principal &&
      token &&
      !token.startsWith(WIDGET_TOKEN_PREFIX) &&
      !isSessionToken(token)
    ) {
      if (!isWellFormedApiKey(token)) throw appError('INVALID_API_KEY');
      caller = { apiKey: token };
    } else {
      caller = { principal: await authenticate(req, deps, deps.em(), API_KEY_OR_WIDGET) };
    }
    let invalid: AppError | undefined;
    let input: ChatMessageInput | undefined;
    if (
      !req.is('application/json') ||
      typeof req.body !== 'object' ||
      req.body === null ||
      Array.isArray(req.body)
    ) {
      invalid = appError('INVALID_REQUEST_BODY');
    } else {
      const parsed = ChatMessageInput.safeParse({ ...req.body, appId: req.params.appId });
      if (parsed.success) input = parsed.data;
      else invalid = validationError(parsed.error.issues);
    }
    const service = new AppChatService(appChatDeps(deps), req.requestId ?? '');
    const turn = await service.prepare(caller, String(req.params.appId), input, STREAM_PATH, invalid, (p) => {
      req.principal = p;
    });
    for (const [k, v] of Object.entries(turn.headers)) res.setHeader(k, v);

    const upstream = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) upstream.abort();
    });
    const out = new SseWriter(res, { heartbeatMs: HEARTBEAT_MS });
    sse = out;
    // Text merged over a short window, the first at once (as an agent turn's deltas, decision
    // 0035): fewer `token` events, each still the next piece of the reply.
    const tokens = new TextCoalescer(coalesceMs, async (content) => {
      out.send({ data: JSON.stringify({ type: 'token', content }) });
    });
    try {
      for await (const ev of service.run(turn, upstream.signal)) {
        if (ev.type === 'token') {
          await tokens.push(ev.content);
          continue;
        }
        await tokens.flush();
        const { cause: _cause, ...event } = ev as typeof ev & { cause?: unknown };
        out.send({ data: JSON.stringify(event) });
      }
      await tokens.flush();
    } catch (err) {
      // The text that came before a failure (the end of the turn not written) is shown, as it
      // would have been without the window, before the `error` event.
      await tokens.flush().catch(() => undefined);
      throw err;
    } finally {
      tokens.discard();
    }
    sse.end();
  } catch (err) {
    const appErr = toAppError(err);
    if (appErr.status >= 500) deps.log.error({ err }, 'app chat stream failed');
    if (sse) {
      sse.send({
        data: JSON.stringify({
          type: 'error',
          code: appErr.code ?? 'INTERNAL_ERROR',
          message: appErr.message,
        }),
      });
      sse.end();
    } else {
      sendError(res, appErr);
    }
  }
}

/** CORS for /apps/* and the app chat stream. */
export const appsRawRoutes: RawRouteModule = {
  name: 'apps',
  mount(router, deps) {
    router.use('/apps', appsCors);
    // The window `token` events are merged over (decision 0035), read once.
    const coalesceMs = coalesceWindowMs(deps.config.env.APP_CHAT_STREAM_COALESCE_MS);
    router.post('/apps/:appId/chat/message/stream', ...jsonBodyParser('1mb'), (req, res) =>
      chatStream(deps, coalesceMs, req, res),
    );
  },
  openapi: {
    [STREAM_PATH]: {
      post: {
        operationId: 'apps-chatStream',
        tags: ['Apps'],
        summary: 'Send a message to an app and stream the reply as server-sent events',
        description:
          'Each `data:` line carries one JSON event: `token` {content}, then `done` {threadId, turnId, contextWindow, metadata}, or `error` {code, message} (e.g. `MODEL_ERROR`; the user message is kept). Accepts a workspace API key or a widget token.',
        security: securityFor(API_KEY_OR_WIDGET),
        requestParams: { path: ChatMessageInput.pick({ appId: true }) },
        requestBody: {
          required: true,
          content: { 'application/json': { schema: ChatMessageInput.omit({ appId: true }) } },
        },
        responses: {
          '200': {
            description: 'A `text/event-stream` of JSON events',
            content: { 'text/event-stream': { schema: ChatStreamEventSchema } },
          },
          '400': {
            description: 'message is required',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '401': {
            description: 'Unauthorized or app not found',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '402': {
            description: 'Insufficient credits',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '404': {
            description: 'Thread not found',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
        },
      },
    },
  },
};
