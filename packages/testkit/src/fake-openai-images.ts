import type http from 'node:http';
import { Readable } from 'node:stream';
import { fakeEdit, seedOf, syntheticScanPng } from './images.js';
import { type ListeningServer, listen } from './listen.js';

/**
 * A fake of the OpenAI images API, speaking the real wire protocol so the `openai` client's
 * `images.generate` / `images.edit` are exercised end to end (`baseURL` pointed at `<url>/v1`):
 * `POST /v1/images/generations` (JSON) and `POST /v1/images/edits` (multipart: `image`,
 * `prompt`, `model`), answering `{created, data: [{b64_json}], usage}` as gpt-image models do.
 * Quota mode answers 429 `insufficient_quota` like OpenAI's billing refusal.
 */

export interface FakeOpenAIImagesBehaviour {
  /** Answer 429 `insufficient_quota` with this message. */
  quota?: string;
  /** Answer this HTTP error with an OpenAI error body. */
  error?: { status: number; message: string };
  /** Report no usage (DALL·E style). */
  noUsage?: boolean;
  /** Never answer (until the client goes away). */
  hang?: boolean;
}

export interface FakeOpenAIImagesRequest {
  path: string;
  headers: http.IncomingHttpHeaders;
  /** JSON body, or the multipart fields (files as `{filename, type, size}`). */
  body: Record<string, unknown>;
  aborted: boolean;
}

export interface FakeOpenAIImages extends ListeningServer {
  /** `baseURL` for the `openai` client. */
  baseUrl: string;
  requests: FakeOpenAIImagesRequest[];
  set(b: FakeOpenAIImagesBehaviour): void;
}

export async function startFakeOpenAIImages(
  opts: FakeOpenAIImagesBehaviour & { apiKey?: string; port?: number } = {},
): Promise<FakeOpenAIImages> {
  let behaviour: FakeOpenAIImagesBehaviour = { ...opts };
  const requests: FakeOpenAIImagesRequest[] = [];

  const json = (res: http.ServerResponse, status: number, body: unknown) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  };
  const error = (
    res: http.ServerResponse,
    status: number,
    message: string,
    type: string,
    code: string | null,
  ) => json(res, status, { error: { message, type, param: null, code } });

  const server = await listen(async (req, res) => {
    const path = new URL(req.url ?? '/', 'http://fake').pathname;
    const auth = req.headers.authorization ?? '';
    if (opts.apiKey !== undefined && auth !== `Bearer ${opts.apiKey}`) {
      req.resume();
      return error(res, 401, 'Incorrect API key provided.', 'invalid_request_error', 'invalid_api_key');
    }
    if (req.method !== 'POST' || (path !== '/v1/images/generations' && path !== '/v1/images/edits')) {
      req.resume();
      return error(res, 404, `Unknown request URL: ${req.method} ${path}`, 'invalid_request_error', null);
    }
    const record: FakeOpenAIImagesRequest = { path, headers: req.headers, body: {}, aborted: false };
    requests.push(record);
    res.on('close', () => {
      if (!res.writableFinished) record.aborted = true;
    });
    let source: Buffer | undefined;
    try {
      if (path === '/v1/images/generations') {
        const chunks: Buffer[] = [];
        for await (const c of req) chunks.push(c as Buffer);
        record.body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } else {
        const form = await new Request('http://fake/', {
          method: 'POST',
          headers: req.headers as Record<string, string>,
          body: Readable.toWeb(req) as unknown as ReadableStream,
          duplex: 'half',
        } as RequestInit).formData();
        for (const [k, v] of form.entries()) {
          if (typeof v === 'string') record.body[k] = v;
          else {
            record.body[k] = { filename: v.name, type: v.type, size: v.size };
            if (k === 'image' || k === 'image[]') source ??= Buffer.from(await v.arrayBuffer());
          }
        }
        if (!source) {
          return error(res, 400, "Missing required parameter: 'image'.", 'invalid_request_error', null);
        }
      }
    } catch (err) {
      return error(
        res,
        400,
        `Could not parse the request: ${(err as Error).message}`,
        'invalid_request_error',
        null,
      );
    }
    const b = behaviour;
    if (b.hang) return;
    if (b.quota) return error(res, 429, b.quota, 'insufficient_quota', 'insufficient_quota');
    if (b.error) return error(res, b.error.status, b.error.message, 'server_error', null);
    const prompt = String(record.body.prompt ?? '');
    if (!prompt)
      return error(res, 400, "Missing required parameter: 'prompt'.", 'invalid_request_error', null);
    let png: Buffer;
    try {
      png = source
        ? await fakeEdit(source)
        : await syntheticScanPng({ width: 64, height: 64, seed: seedOf(prompt) });
    } catch (err) {
      return error(res, 400, `Invalid image file: ${(err as Error).message}`, 'invalid_request_error', null);
    }
    const inputTokens = Math.ceil(prompt.length / 4) + (source ? 65 : 0);
    json(res, 200, {
      created: Math.floor(Date.now() / 1000),
      data: [{ b64_json: png.toString('base64') }],
      ...(b.noUsage
        ? {}
        : {
            usage: {
              input_tokens: inputTokens,
              output_tokens: 272,
              total_tokens: inputTokens + 272,
              input_tokens_details: {
                text_tokens: Math.ceil(prompt.length / 4),
                image_tokens: source ? 65 : 0,
              },
            },
          }),
    });
  }, opts.port);

  return {
    ...server,
    baseUrl: `${server.url}/v1`,
    requests,
    set(nb) {
      behaviour = { ...nb };
    },
  };
}
