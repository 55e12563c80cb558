import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Request } from 'express';
import { z } from 'zod';
import { bearerToken, isWellFormedApiKey } from '../../auth/api-keys.js';
import { API_KEY, authenticate } from '../../auth/authenticate.js';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { appError } from '../../errors/index.js';
import { sendError, toAppError } from '../../http/errors.js';
import { jsonReader, readJsonBody } from '../../http/json-body.js';
import { securityFor } from '../../http/openapi-security.js';
import type { RawRouteModule } from '../../http/raw-routes.js';
import { isAbortError } from '../../providers/abort.js';
import type { LlmMessage, ModelInfo } from '../../providers/llm.js';
import { coalesceWindowMs, TextWindow } from '../../runs/text-coalescer.js';
import { trackSse } from '../../telemetry/metrics.js';
import { EarlyCall } from './early-call.js';
import { ChatRequestSchema } from './schema.js';
import { ChatService, type PreparedChat } from './service.js';

/** Bodies above this are refused (the spec recommends ~20,000 characters in total). */
const BODY_LIMIT = '1mb';

const STREAM_HEADERS: Record<string, string> = {
  'Content-Type': 'text/event-stream',
  'Cache-Control': 'no-cache',
  Connection: 'keep-alive',
  'X-Accel-Buffering': 'no',
};

const jsonBody = jsonReader(BODY_LIMIT);

/** A Node request as the fast path and express both hand it over. */
type ChatRequestMessage = IncomingMessage & { requestId?: string; principal?: Principal; body?: unknown };

/**
 * `POST /chat`: the reply streamed as plain text chunks under `text/event-stream` (no JSON,
 * no terminator; spec 4.1, 6.1). The hot path: one SQL statement on the plain pool before the
 * upstream call (key, rate limit, quota), the upstream stream parsed without the SDK, each text
 * read a synchronous `res.write`, and the usage written after the end. No tRPC, no ORM, no
 * express API: the handler takes Node's request and response, so the HTTP server's fast path
 * (`http/fast-path.ts`) can call it without the express stack, and express mounts it too.
 */
function chatHandler(deps: ServerDeps) {
  const service = new ChatService(deps);
  const windowMs = chatStreamWindowMs(deps);
  return async (req: ChatRequestMessage, res: ServerResponse): Promise<void> => {
    const started = Date.now();
    const requestId = req.requestId ?? '';
    // Listen from the start: a client gone during the checks must not start a generation.
    const ac = new AbortController();
    let clientGone = false;
    res.on('close', () => {
      if (!res.writableFinished) {
        clientGone = true;
        ac.abort();
      }
    });
    let principal: Principal;
    let prepared: PreparedChat;
    const progress = { textChars: 0, started: false };
    // The model call, when started before the admission answered (`EarlyCall`).
    let early: EarlyCall | undefined;
    const startEarly = (input: { model: ModelInfo; messages: LlmMessage[] }) => {
      early = new EarlyCall(
        (onText) =>
          deps.llm.streamText(
            { model: input.model, messages: input.messages, signal: ac.signal },
            onText,
            progress,
            {
              coalesce: true,
            },
          ),
        () => ac.abort(),
      );
    };
    try {
      if ((req as Request).consoleApi) {
        // The web console's mount: the session, as every route there (decision 0025).
        const session = await authenticate(req as Request, deps, deps.em(), API_KEY);
        const { body, error } = await readJsonBody(jsonBody, req, res);
        ({ principal, prepared } = await service.prepareForPrincipal(session, body, error));
      } else {
        // A malformed key is refused before the body is read; everything else in one statement.
        const apiKey = bearerToken(req.headers.authorization);
        if (!apiKey || !isWellFormedApiKey(apiKey)) throw appError('INVALID_API_KEY');
        const { body, error } = await readJsonBody(jsonBody, req, res);
        ({ principal, prepared } = await service.prepare(
          apiKey,
          body,
          error,
          (p) => {
            req.principal = p;
          },
          undefined,
          startEarly,
        ));
      }
    } catch (err) {
      // A refused request's early call is aborted; nothing of it reaches the client.
      void early?.cancel();
      sendError(res, toAppError(err));
      return;
    }
    if (clientGone) {
      // Gone before the model's output was due: a call started early is aborted and what the
      // model produced meanwhile is recorded; otherwise nothing was sent upstream and only the
      // quota reservation, if one was taken, is given back (through an empty usage record).
      const call = early;
      if (call || prepared.reservationId)
        void (call ? call.cancel() : Promise.resolve())
          .then(() =>
            service.record({
              principal,
              requestId,
              prepared,
              status: 'aborted',
              streamedChars: progress.textChars,
              producedOutput: progress.started,
              latencyMs: Date.now() - started,
            }),
          )
          .catch((err: unknown) => deps.log.error({ err, requestId }, 'recording chat usage failed'));
      return;
    }
    let headersSent = false;
    const sendHeaders = () => {
      headersSent = true;
      // Node's HTTP server already disables Nagle on accepted sockets (`noDelay` default).
      res.writeHead(200, { ...STREAM_HEADERS, ...prepared.headers });
      trackSse(res);
    };
    // Text within the window after a write gathers into the next one (the first is never held).
    const text = new TextWindow(windowMs, (piece) => {
      if (clientGone) return;
      if (!headersSent) sendHeaders();
      res.write(piece);
    });
    const onText = (piece: string) => text.push(piece);

    let status: 'success' | 'error' | 'aborted' = 'success';
    let usage: { inputTokens: number; outputTokens: number } | undefined;
    try {
      const result = early
        ? await early.release(onText)
        : await deps.llm.streamText(
            { model: prepared.model, messages: prepared.messages, signal: ac.signal },
            onText,
            progress,
            { coalesce: true },
          );
      usage = result.usage.estimated ? undefined : result.usage;
      if (!clientGone) {
        if (!headersSent) sendHeaders();
        // The text still in the window and the end of the response in one write.
        const rest = text.take();
        if (rest) res.end(rest);
        else res.end();
      } else status = 'aborted';
    } catch (err) {
      if (clientGone || isAbortError(err)) {
        status = 'aborted';
      } else {
        status = 'error';
        const appErr = toAppError(err);
        if (appErr.status >= 500 && appErr.status !== 502) deps.log.error({ err, requestId }, 'chat failed');
        // Before the first byte: a proper error response. After it: cut the connection so the
        // client sees a failure, never a truncated reply that looks complete.
        if (headersSent) res.destroy();
        else sendError(res, appErr);
      }
    } finally {
      // Text held in the window of a failed or abandoned stream is not sent.
      text.take();
      // Every path past the checks records usage, even if the error handling above throws.
      service
        .record({
          principal,
          requestId,
          prepared,
          status,
          usage,
          streamedChars: progress.textChars,
          producedOutput: progress.started,
          latencyMs: Date.now() - started,
        })
        .catch((err: unknown) => deps.log.error({ err, requestId }, 'recording chat usage failed'));
    }
  };
}

/**
 * `CHAT_STREAM_COALESCE_MS` (default 20): how long text that comes right after a write waits to
 * go out with what follows it, on `/chat` and the OpenAI-compatible stream (0: one write per
 * network read from the model). The cost of a stream is its writes (decision 0051).
 */
export const chatStreamWindowMs = (deps: ServerDeps) =>
  coalesceWindowMs(deps.config.env.CHAT_STREAM_COALESCE_MS);

const errorResponse = (description: string) => ({ description });

export const chatRoutes: RawRouteModule = {
  name: 'chat',
  mount(router, deps) {
    const handler = chatHandler(deps);
    router.post('/chat', (req, res) => handler(req, res));
  },
  fast: [{ method: 'POST', path: '/chat', handler: chatHandler }],
  openapi: {
    '/chat': {
      post: {
        tags: ['Chat'],
        summary: 'Chat completion streamed as plain text chunks',
        description:
          'Streams the reply as `text/event-stream` plain-text chunks (no JSON, no terminator); the full reply is the concatenation of all chunks. Token-metered against the workspace monthly quota; rate limited per workspace (`RateLimit-*` headers).',
        security: securityFor(API_KEY),
        requestBody: { required: true, content: { 'application/json': { schema: ChatRequestSchema } } },
        responses: {
          200: {
            description: 'The reply, streamed as plain text chunks.',
            content: { 'text/event-stream': { schema: z.string() } },
          },
          400: errorResponse(
            '`Messages array is required`, `Last message must have valid content`, `Invalid request body`, `Invalid model`',
          ),
          401: errorResponse('`Invalid API key`'),
          403: errorResponse('`Token limit exceeded`'),
          429: errorResponse('`Rate limit exceeded` (with `Retry-After` and `RateLimit-*` headers)'),
          502: errorResponse('`AI model error: <details>` or `AI service is temporarily unavailable`'),
          503: errorResponse('`No AI model configured`'),
        },
      },
    },
  },
};
