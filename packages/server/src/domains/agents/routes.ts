import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Request, Response, Router } from 'express';
import { z } from 'zod';
import { bearerToken, hashApiKey, isWellFormedApiKey } from '../../auth/api-keys.js';
import { API_KEY, authenticate } from '../../auth/authenticate.js';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { appError } from '../../errors/index.js';
import { ErrorBodySchema, sendError, toAppError } from '../../http/errors.js';
import { JSON_TYPE, jsonBodyParser, jsonReader, readJsonBody } from '../../http/json-body.js';
import { securityFor } from '../../http/openapi-security.js';
import type { FastHandler, RawRouteModule } from '../../http/raw-routes.js';
import { SseWriter } from '../../http/sse.js';
import type { RunRecord } from '../../runs/index.js';
import { isUuid } from './config.js';
import { SendMessageInput, type SendMessageInputType } from './schema.js';
import type { AgentDeps } from './service.js';
import { AgentTurns } from './turns.js';

const heartbeatMs = (deps: ServerDeps) => {
  const n = Number(deps.config.env.AGENT_STREAM_HEARTBEAT_MS ?? 15_000);
  return Number.isFinite(n) && n > 0 ? n : 15_000;
};

/** A Node request as the fast path and express both hand it over. */
type TurnRequest = IncomingMessage & { requestId?: string; principal?: Principal; body?: unknown };

/** Writes a run's log as SSE: `id:` is the event's sequence, `event:` its type. */
async function pipeRun(deps: ServerDeps, res: ServerResponse, run: RunRecord, afterSeq: number) {
  const sse = new SseWriter(res, { heartbeatMs: heartbeatMs(deps) });
  const stop = new AbortController();
  // Only a client that leaves before the end stops the reader: an abort costs an exception
  // object and its listeners, which a stream that ended (every turn) does not need.
  let ended = false;
  res.on('close', () => {
    if (!ended) stop.abort();
  });
  try {
    for await (const ev of deps.runs.stream(run.id, afterSeq, stop.signal)) {
      sse.sendJson({ ...ev.payload, type: ev.type }, ev.seq);
    }
    ended = true;
    sse.end();
  } catch (err) {
    deps.log.error({ err, runId: run.id }, 'agent stream failed');
    const e = toAppError(err);
    sse.sendJson({ type: 'error', code: e.code ?? 'STREAM_ERROR', message: e.message });
    // A clean end after the error event: a reader on fetch loses what it has not read yet when
    // the body errors, the event included. The run goes on; the client reconnects with
    // Last-Event-ID (the SDK does) once the cause has passed.
    sse.end();
  }
}

/**
 * The hot path of a turn (decision 0029): a valid request with an API key, admitted in one
 * statement on the plain pool, then its stream.
 */
async function keyTurn(
  deps: ServerDeps,
  req: TurnRequest,
  res: ServerResponse,
  apiKey: string,
  sessionId: string,
  input: SendMessageInputType,
): Promise<void> {
  try {
    const { run, headers } = await AgentTurns.startKeyTurn(
      { ...deps, metering: deps.poolMetering },
      hashApiKey(apiKey),
      sessionId,
      input,
      { requestId: req.requestId ?? '' },
      (p) => {
        req.principal = p;
      },
    );
    for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
    await pipeRun(deps, res, run, 0);
  } catch (err) {
    const e = toAppError(err);
    if (e.status >= 500) deps.log.error({ err }, 'request failed');
    sendError(res, e);
  }
}

/** Whether a parsed turn request may take the hot path (everything else: the general one). */
const keyTurnFits = (deps: ServerDeps, sessionId: string, input: SendMessageInputType) =>
  input.concurrency !== 'interrupt' && isUuid(sessionId) && modelResolves(deps, input.model);

/**
 * `POST /managed-agents/sessions/:sessionId/messages` before express (`http/fast-path.ts`),
 * as `/chat` is: a request with a well-formed API key and a JSON body is read here and, when
 * it fits the hot path, answered here. Everything else goes to express, which answers its
 * errors in the documented order (a body already read stays parsed).
 */
const sendMessageFast = (deps: ServerDeps): FastHandler => {
  const reader = jsonReader(BODY_LIMIT);
  return async (req: TurnRequest, res, { params, next }) => {
    const apiKey = bearerToken(req.headers.authorization);
    const sessionId = params.sessionId ?? '';
    if (
      !apiKey ||
      !isWellFormedApiKey(apiKey) ||
      !isUuid(sessionId) ||
      !JSON_TYPE.test(req.headers['content-type'] ?? '')
    ) {
      next();
      return;
    }
    // Body errors come first on either path (express parses before it authenticates).
    const { body, error } = await readJsonBody(reader, req, res);
    if (error) {
      sendError(res, error);
      return;
    }
    const parsed = SendMessageInput.safeParse(body ?? {});
    if (!parsed.success || !keyTurnFits(deps, sessionId, parsed.data)) {
      next();
      return;
    }
    await keyTurn(deps, req, res, apiKey, sessionId, parsed.data);
  };
};

/** A per-turn model override that resolves (none counts). */
function modelResolves(deps: ServerDeps, model: string | undefined): boolean {
  if (!model) return true;
  try {
    deps.models?.resolve('chat', model);
    return true;
  } catch {
    return false;
  }
}

const handle =
  (deps: ServerDeps, fn: (req: Request, res: Response, svc: AgentTurns) => Promise<void>) =>
  async (req: Request, res: Response) => {
    try {
      const em = deps.em();
      const principal = await authenticate(req, deps, em, API_KEY);
      // The stream routes' rate limit and credit check run on the plain pool (decision 0029).
      const streamDeps = { ...deps, metering: deps.poolMetering } as AgentDeps;
      await fn(req, res, new AgentTurns(em, streamDeps, principal));
    } catch (err) {
      const e = toAppError(err);
      if (e.status >= 500) deps.log.error({ err }, 'request failed');
      sendError(res, e);
    }
  };

const BODY_LIMIT = '1mb';

export const agentRoutes: RawRouteModule = {
  name: 'agents',
  fast: [{ method: 'POST', path: '/managed-agents/sessions/:sessionId/messages', handler: sendMessageFast }],
  mount(router: Router, deps: ServerDeps) {
    const json = jsonBodyParser(BODY_LIMIT);
    const slow = handle(deps, async (req, res, svc) => {
      if (!req.is('application/json')) throw appError('INVALID_REQUEST_BODY');
      const parsed = SendMessageInput.safeParse(req.body ?? {});
      if (!parsed.success) throw toAppError(parsed.error);
      const run = await svc.startTurn(String(req.params.sessionId), parsed.data, {
        requestId: req.requestId ?? '',
      });
      for (const [k, v] of Object.entries(svc.rateHeaders)) res.setHeader(k, v);
      await pipeRun(deps, res, run, 0);
    });
    router.post('/managed-agents/sessions/:sessionId/messages', ...json, async (req, res) => {
      // The hot path (decision 0029), for an app used without `createServer`'s listener
      // and the console's mount. Anything else (another credential, a body or session id that
      // will be refused, a model override that does not resolve, `interrupt`) takes the
      // general path, which answers its errors in the documented order.
      const apiKey = bearerToken(req.headers.authorization);
      const sessionId = String(req.params.sessionId);
      const parsed = req.is('application/json') ? SendMessageInput.safeParse(req.body ?? {}) : undefined;
      if (
        req.consoleApi ||
        req.principal ||
        apiKey === undefined ||
        !isWellFormedApiKey(apiKey) ||
        !parsed?.success ||
        !keyTurnFits(deps, sessionId, parsed.data)
      ) {
        return slow(req, res);
      }
      await keyTurn(deps, req, res, apiKey, sessionId, parsed.data);
    });
    router.get(
      '/managed-agents/sessions/:sessionId/runs/:runId/stream',
      handle(deps, async (req, res, svc) => {
        const run = await svc.requireSessionRun(String(req.params.sessionId), String(req.params.runId));
        const raw = req.header('last-event-id') ?? (req.query.after as string | undefined) ?? '0';
        const after = /^\d+$/.test(raw) ? Number(raw) : 0;
        await pipeRun(deps, res, run, after);
      }),
    );
  },
  openapi: {
    '/managed-agents/sessions/{sessionId}/messages': {
      post: {
        tags: ['Managed agents'],
        summary: 'Send a message: streams the turn as server-sent JSON events (docs/agents.md)',
        operationId: 'agents-sendMessage',
        security: securityFor(API_KEY),
        requestParams: { path: z.object({ sessionId: z.string() }) },
        requestBody: { required: true, content: { 'application/json': { schema: SendMessageInput } } },
        responses: {
          '200': {
            description:
              'text/event-stream; every message has `id:` (its sequence in the run log) and `event:` equal to `data.type`',
            content: { 'text/event-stream': { schema: z.string() } },
          },
          '400': {
            description: 'message is required',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '402': {
            description: 'Insufficient credits',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '409': {
            description: 'A turn is already running (concurrency `reject`)',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '429': {
            description: 'Rate limit exceeded',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
        },
      },
    },
    '/managed-agents/sessions/{sessionId}/runs/{runId}/stream': {
      get: {
        tags: ['Managed agents'],
        summary: 'Reconnect to a turn stream: replays events after `Last-Event-ID`, then tails',
        operationId: 'agents-streamRun',
        security: securityFor(API_KEY),
        requestParams: {
          path: z.object({ sessionId: z.string(), runId: z.string() }),
          header: z.object({ 'last-event-id': z.string().optional() }),
          query: z.object({ after: z.string().optional() }),
        },
        responses: {
          '200': {
            description: 'text/event-stream',
            content: { 'text/event-stream': { schema: z.string() } },
          },
          '404': {
            description: 'Run not found',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
        },
      },
    },
  },
};
