import express, { type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import type { ServerDeps } from '../../context.js';
import { AppError, INVALID_REQUEST_BODY, sendError, toAppError } from '../../http/errors.js';
import type { RawRouteModule } from '../../http/raw-routes.js';
import { isAbortError } from '../../providers/openai-provider.js';
import { authenticateApiKey } from '../../trpc.js';
import { ChatRequestSchema, parseChatRequest } from './schema.js';
import { ChatService } from './service.js';

/** Bodies above this are refused (the spec recommends ~20,000 characters in total). */
const BODY_LIMIT = '1mb';

const STREAM_HEADERS: Record<string, string> = {
  'Content-Type': 'text/event-stream',
  'Cache-Control': 'no-cache',
  Connection: 'keep-alive',
  'X-Accel-Buffering': 'no',
};

const jsonBody = express.json({ limit: BODY_LIMIT, type: () => true });

function requireJson(req: Request, _res: Response, next: NextFunction) {
  const type = req.headers['content-type'] ?? '';
  if (!/^application\/json\s*(;|$)/i.test(type)) return next(new AppError(400, INVALID_REQUEST_BODY));
  next();
}

function authenticate(deps: ServerDeps) {
  return (req: Request, _res: Response, next: NextFunction) => {
    authenticateApiKey(req, deps.em()).then(() => next(), next);
  };
}

/**
 * `POST /chat`: the reply streamed as plain text chunks under `text/event-stream` (no JSON,
 * no terminator; spec 4.1, 6.1). The chunk path is a synchronous callback from the provider
 * straight into `res.write`: no tRPC, no per-chunk objects; usage is written after the end.
 */
function chatHandler(deps: ServerDeps) {
  const service = new ChatService(deps);
  return async (req: Request, res: Response) => {
    const started = Date.now();
    const principal = req.principal;
    if (!principal) return sendError(res, new AppError(401, 'Invalid API key'));
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
    let prepared: Awaited<ReturnType<ChatService['prepare']>>;
    try {
      prepared = await service.prepare(principal, parseChatRequest(req.body));
    } catch (err) {
      return sendError(res, toAppError(err));
    }
    if (clientGone) return;
    const progress = { textChars: 0, started: false };
    let headersSent = false;
    const sendHeaders = () => {
      headersSent = true;
      res.writeHead(200, { ...STREAM_HEADERS, ...prepared.headers });
      res.socket?.setNoDelay(true);
    };
    const onText = (text: string) => {
      if (clientGone) return;
      if (!headersSent) sendHeaders();
      res.write(text);
    };

    let status: 'success' | 'error' | 'aborted' = 'success';
    let usage: { inputTokens: number; outputTokens: number } | undefined;
    try {
      const result = await deps.llm.streamText(
        { model: prepared.model, messages: prepared.messages, signal: ac.signal },
        onText,
        progress,
      );
      usage = result.usage.estimated ? undefined : result.usage;
      if (!clientGone) {
        if (!headersSent) sendHeaders();
        res.end();
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
    }
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
  };
}

const errorResponse = (description: string) => ({ description });

export const chatRoutes: RawRouteModule = {
  name: 'chat',
  mount(router, deps) {
    router.post('/chat', authenticate(deps), requireJson, jsonBody, chatHandler(deps));
  },
  openapi: {
    '/chat': {
      post: {
        tags: ['Chat'],
        summary: 'Chat completion streamed as plain text chunks',
        description:
          'Streams the reply as `text/event-stream` plain-text chunks (no JSON, no terminator); the full reply is the concatenation of all chunks. Token-metered against the workspace monthly quota; rate limited per workspace (`RateLimit-*` headers).',
        security: [{ Authorization: [] }],
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
