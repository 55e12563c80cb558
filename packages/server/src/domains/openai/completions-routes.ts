import type { ServerResponse } from 'node:http';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { AppError, appError } from '../../errors/index.js';
import { jsonReader, readJsonBody } from '../../http/json-body.js';
import { isAbortError } from '../../providers/abort.js';
import type { LlmMessage, ModelInfo, ToolCallDelta } from '../../providers/llm.js';
import { EarlyCall } from '../chat/early-call.js';
import { chatStreamWindowMs } from '../chat/routes.js';
import { type ChatParse, ChatService, type PreparedChat } from '../chat/service.js';
import { agentCompletion } from './agent-routes.js';
import { type CompletionRequest, parseCompletionRequest } from './chat-request.js';
import { ChunkWriter, completionObject, usageOf } from './completion-writer.js';
import { sendOpenAiError, toOpenAiError } from './error-routes.js';
import { modelNotFound, OpenAiError, withOpenAiRateHeaders } from './errors.js';
import { type OpenAiRequest, requireApiKey } from './request.js';

/** Endpoint of this surface's chat usage records (metered as `/chat`, told apart in usage). */
export const COMPLETIONS_ENDPOINT = '/openai/chat/completions';

/** Bodies above this are refused with 413 (a long conversation with tool results fits). */
export const COMPLETIONS_BODY_LIMIT = '4mb';

/** A chat model of the catalog by its public id; 404 `model_not_found` otherwise. */
export function resolveChatModel(deps: ServerDeps, id: string): ModelInfo {
  const model = deps.models.list('chat').find((m) => m.id === id);
  if (!model) throw modelNotFound(id);
  return model;
}

/**
 * `POST /openai/chat/completions`. A model of the catalog is `/chat`'s work in OpenAI's shapes:
 * one statement before the upstream call (key, the `chat` rate-limit unit, the monthly token
 * quota reservation; `ChatService.prepare`), the upstream stream read by the provider's fast
 * path with tool-call fragments handed on as they come, and the usage record after the end. An
 * `agent/<agentId>` model runs a managed-agent turn (`agent-model.ts`).
 */
export function completionsHandler(deps: ServerDeps) {
  const service = new ChatService(deps);
  const reader = jsonReader(COMPLETIONS_BODY_LIMIT);
  const windowMs = chatStreamWindowMs(deps);
  return async (req: OpenAiRequest, res: ServerResponse): Promise<void> => {
    const started = Date.now();
    const requestId = req.requestId ?? '';
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
    let request: CompletionRequest | undefined;
    let refused: OpenAiError | undefined;
    const progress = { textChars: 0, started: false };
    /** The upstream call of a parsed request (`onTool`: each tool-call fragment as it comes). */
    const call = (
      r: CompletionRequest,
      model: ModelInfo,
      messages: LlmMessage[],
      onText: (t: string) => void,
      onTool: (d: ToolCallDelta) => void,
    ) =>
      deps.llm.streamText(
        {
          model,
          messages,
          signal: ac.signal,
          ...(r.temperature !== undefined ? { temperature: r.temperature } : {}),
          ...(r.maxTokens !== undefined ? { maxTokens: r.maxTokens } : {}),
          passthrough: r.passthrough,
        },
        onText,
        progress,
        { coalesce: true, onToolCallDelta: onTool },
      );
    // The upstream call, when started before the admission answered (`EarlyCall`).
    let early: EarlyCall | undefined;
    const startEarly = (input: { model: ModelInfo; messages: LlmMessage[] }) => {
      const r = request;
      if (!r) return;
      early = new EarlyCall(
        (onText, onTool) => call(r, input.model, input.messages, onText, onTool),
        () => ac.abort(),
      );
    };
    try {
      const apiKey = requireApiKey(req);
      const { body, error } = await readJsonBody(reader, req, res);
      let parsed: CompletionRequest | undefined;
      let invalid: unknown;
      if (!error) {
        try {
          parsed = parseCompletionRequest(body);
        } catch (err) {
          // Reported after the key is checked (`prepare`).
          invalid = err;
        }
        // An agent model takes its own path (its checks are a turn's, not `/chat`'s).
        if (parsed?.agentId !== undefined) {
          await agentCompletion(deps, req, res, apiKey, parsed);
          return;
        }
      }
      const how: ChatParse = {
        endpoint: COMPLETIONS_ENDPOINT,
        parse() {
          try {
            if (!parsed) throw invalid;
            request = parsed;
            return { messages: parsed.messages, model: resolveChatModel(deps, parsed.model) };
          } catch (err) {
            // `prepare` reports a body's refusal after the key (and spends no rate-limit unit on
            // it) as the table's error; the OpenAI one is answered in its place.
            if (!(err instanceof OpenAiError)) throw err;
            refused = err;
            throw appError('INVALID_REQUEST_BODY');
          }
        },
      };
      ({ principal, prepared } = await service.prepare(
        apiKey,
        body,
        error,
        (p) => {
          req.principal = p;
        },
        how,
        startEarly,
      ));
    } catch (err) {
      // A refused request's early call is aborted; nothing of it reaches the client.
      void early?.cancel();
      const bodyRefused = refused && err instanceof AppError && err.key === 'INVALID_REQUEST_BODY';
      sendOpenAiError(res, bodyRefused ? refused : err);
      return;
    }
    const r = request as CompletionRequest;
    const headers = withOpenAiRateHeaders(prepared.headers);
    let toolChars = 0;
    let status: 'success' | 'error' | 'aborted' = 'success';
    let usage: { inputTokens: number; outputTokens: number } | undefined;
    const writer = r.stream ? new ChunkWriter(res, r.model, r.includeUsage, headers, windowMs) : undefined;
    if (clientGone) {
      // Gone before the model's output was due: a call started early is aborted and what the
      // model produced meanwhile is recorded; otherwise nothing was sent upstream and only the
      // quota reservation, if one was taken, is given back (through an empty usage record).
      if (!early && !prepared.reservationId) return;
      await early?.cancel();
      status = 'aborted';
    } else {
      try {
        let text = '';
        const onText = writer
          ? (t: string) => {
              if (!clientGone) writer.text(t);
            }
          : (t: string) => {
              text += t;
            };
        const onTool = (d: ToolCallDelta) => {
          toolChars += (d.name?.length ?? 0) + (d.arguments?.length ?? 0);
          if (writer && !clientGone) writer.toolDelta(d);
        };
        const result = early
          ? await early.release(onText, onTool)
          : await call(r, prepared.model, prepared.messages, onText, onTool);
        usage = result.usage.estimated ? undefined : result.usage;
        if (clientGone) status = 'aborted';
        else {
          const u = usageOf(result.usage.inputTokens, result.usage.outputTokens);
          if (writer) writer.finish(result.finishReason, u);
          else {
            const body = JSON.stringify(
              completionObject({
                model: r.model,
                text,
                toolCalls: result.toolCalls,
                finishReason: result.finishReason,
                usage: u,
              }),
            );
            res.writeHead(200, {
              ...headers,
              'Content-Type': 'application/json; charset=utf-8',
              'Content-Length': String(Buffer.byteLength(body)),
            });
            res.end(body);
          }
        }
      } catch (err) {
        if (clientGone || isAbortError(err)) status = 'aborted';
        else {
          status = 'error';
          const e = toOpenAiError(err);
          if (e.status >= 500 && e.status !== 502)
            deps.log.error({ err, requestId }, 'chat completion failed');
          if (writer?.headersSent) writer.fail(e);
          else sendOpenAiError(res, e);
        }
      } finally {
        writer?.close();
      }
    }
    // Every path past the checks records usage.
    service
      .record({
        principal,
        requestId,
        prepared,
        status,
        usage,
        streamedChars: progress.textChars + toolChars,
        producedOutput: progress.started,
        latencyMs: Date.now() - started,
      })
      .catch((err: unknown) => deps.log.error({ err, requestId }, 'recording chat usage failed'));
  };
}
