import OpenAI, { toFile } from 'openai';
import type Replicate from 'replicate';
import type { Prediction } from 'replicate';
import type { ModelInfo } from './llm.js';

/**
 * The contract between the image domain and image providers: one image out per call, as bytes,
 * with the tokens the provider reported (OpenAI's gpt-image models do; Replicate does not).
 * Implementations: Replicate predictions through the `replicate` client, and an
 * OpenAI-compatible images API through the `openai` client.
 */
export interface ImageRequest {
  model: ModelInfo;
  prompt: string;
  /** The source image of an edit (already checked to be PNG, JPEG, WebP or GIF). */
  source?: { bytes: Buffer; mimeType: string };
  /** The caller went away: stop, and cancel what runs upstream. */
  signal?: AbortSignal;
}

export interface ImageResult {
  bytes: Buffer;
  inputTokens: number;
  outputTokens: number;
}

export interface ImageProvider {
  generate(req: ImageRequest): Promise<ImageResult>;
}

/** The provider's quota or billing refusal: 429 with the provider's own message. */
export class ImageQuotaError extends Error {
  override name = 'ImageQuotaError';
}

/**
 * Any other provider failure. The message is built from the provider's status and its error
 * text only, never from the client's own message (which names the endpoint URL).
 */
export class ImageProviderError extends Error {
  override name = 'ImageProviderError';
}

export class ImageAbortedError extends Error {
  override name = 'ImageAbortedError';
}

/**
 * An answer the `replicate` client would retry on its own (429 for any request, 5xx for a GET),
 * surfaced after the first one: the client re-sends such a request up to six times, without
 * reading `Retry-After`, which would turn a quota refusal into a burst of identical requests.
 */
export class ReplicateRetryableAnswer extends Error {
  override name = 'ReplicateRetryableAnswer';
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`HTTP ${status}`);
  }
}

/**
 * The `fetch` given to the `replicate` client: one network request per client request. The
 * client's retry loop calls `fetch` again with the same `init` object, so a refused `init`
 * answers every further call with the same error, without sending anything, and the client
 * gives it up at once.
 */
export function replicateFetchOnce(inner: typeof fetch = fetch): typeof fetch {
  const refused = new WeakMap<object, ReplicateRetryableAnswer>();
  return async (input, init) => {
    const key = init ?? {};
    const seen = refused.get(key);
    if (seen) throw seen;
    const res = await inner(input, init);
    const method = (init?.method ?? 'GET').toUpperCase();
    if (res.status === 429 || (method === 'GET' && res.status >= 500)) {
      const answer = new ReplicateRetryableAnswer(res.status, await res.text().catch(() => ''));
      if (init) refused.set(init, answer);
      throw answer;
    }
    return res;
  };
}

export interface ImageProviderSettings {
  /** Seconds the create asks Replicate to hold the answer (`Prefer: wait=N`); 0: no header. */
  preferWaitSeconds: number;
  /** Whole generation, polls included. */
  timeoutMs: number;
  /** First poll delay; each next one ×1.5 up to `pollMaxMs`. */
  pollInitialMs: number;
  pollMaxMs: number;
  /** Largest image accepted from a provider. */
  maxOutputBytes: number;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });

/** Strips anything that looks like a URL or a bearer token from provider text. */
export function scrub(text: string): string {
  return text
    .replace(/\bhttps?:\/\/\S+/gi, '<url>')
    .replace(/\b(r8|sk)[-_][A-Za-z0-9_-]{4,}/g, '<redacted>')
    .replace(/\s+/g, ' ')
    .trim()
    .slice(0, 500);
}

/** The `detail` / `error.message` of a provider's error body, or the status line. */
function providerText(status: number, body: string): string {
  try {
    const j = JSON.parse(body) as {
      detail?: unknown;
      title?: unknown;
      error?: { message?: unknown } | string;
    };
    const text =
      (typeof j.detail === 'string' && j.detail) ||
      (typeof j.error === 'string' && j.error) ||
      (typeof j.error === 'object' && typeof j.error?.message === 'string' && j.error.message) ||
      (typeof j.title === 'string' && j.title);
    if (text) return scrub(text);
  } catch {
    // not JSON
  }
  return `HTTP ${status}`;
}

async function readCapped(res: Response, max: number): Promise<Buffer> {
  const declared = Number(res.headers.get('content-length') ?? '0');
  if (declared > max) throw new ImageProviderError(`the provider's image exceeds ${max} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  if (!res.body) return Buffer.alloc(0);
  for await (const c of res.body as unknown as AsyncIterable<Uint8Array>) {
    size += c.length;
    if (size > max) throw new ImageProviderError(`the provider's image exceeds ${max} bytes`);
    chunks.push(Buffer.from(c));
  }
  return Buffer.concat(chunks);
}

/**
 * Replicate: creates a prediction (`Prefer: wait=N`), polls it with backoff until it is
 * terminal or the total timeout passes, cancels it when the caller goes away or time runs out,
 * and downloads the first output URL.
 */
export class ReplicateImageProvider implements ImageProvider {
  private clientPromise: Promise<Replicate> | undefined;
  private client!: Replicate;

  constructor(
    private readonly provider: { baseUrl?: string; apiKey?: string },
    private readonly settings: ImageProviderSettings,
  ) {}

  /** The client, its module loaded on first use (the server's start loads only what it needs). */
  private async ready(): Promise<void> {
    this.clientPromise ??= import('replicate').then(
      ({ default: ReplicateClient }) =>
        new ReplicateClient({
          auth: this.provider.apiKey ?? '',
          baseUrl: this.provider.baseUrl,
          useFileOutput: false,
          userAgent: 'ai-suite',
          fetch: replicateFetchOnce(),
        }),
    );
    this.client = await this.clientPromise;
  }

  async generate(req: ImageRequest): Promise<ImageResult> {
    await this.ready();
    const started = Date.now();
    const input: Record<string, unknown> = { prompt: req.prompt, output_format: 'png' };
    if (req.source) {
      input.image = `data:${req.source.mimeType};base64,${req.source.bytes.toString('base64')}`;
    }
    const [ref, version] = req.model.upstream.split(':');
    // Replicate holds the create at most this long: never past the total timeout.
    const wait = Math.min(this.settings.preferWaitSeconds, Math.floor(this.settings.timeoutMs / 1000));
    // Not aborted by the caller's signal or the deadline: a create Replicate has accepted cannot
    // be taken back by dropping the connection. Instead the caller is answered when time runs out
    // (or when it goes away), and the prediction is canceled by id once the create's answer comes.
    const creating = this.client.predictions.create({
      ...(version ? { version } : { model: ref as `${string}/${string}` }),
      input,
      ...(wait > 0 ? { wait } : {}),
    });
    const outcome = await this.settleWithin(creating, this.settings.timeoutMs, req.signal);
    if (outcome.kind !== 'settled') {
      creating.then(
        (p) => this.cancel(p.id),
        () => undefined,
      );
      if (outcome.kind === 'aborted') throw new ImageAbortedError('The caller went away');
      throw new ImageProviderError(
        `timed out after ${Number((this.settings.timeoutMs / 1000).toFixed(1))} s`,
      );
    }
    if ('error' in outcome) throw this.apiError(outcome.error);
    let prediction: Prediction = outcome.value;
    let delay = this.settings.pollInitialMs;
    while (prediction.status === 'starting' || prediction.status === 'processing') {
      if (req.signal?.aborted) {
        await this.cancel(prediction.id);
        throw new ImageAbortedError('The caller went away');
      }
      if (Date.now() - started >= this.settings.timeoutMs) {
        await this.cancel(prediction.id);
        throw new ImageProviderError(
          `timed out after ${Number((this.settings.timeoutMs / 1000).toFixed(1))} s`,
        );
      }
      await sleep(Math.min(delay, Math.max(0, this.settings.timeoutMs - (Date.now() - started))), req.signal);
      delay = Math.min(this.settings.pollMaxMs, Math.ceil(delay * 1.5));
      if (req.signal?.aborted) continue;
      try {
        prediction = await this.client.predictions.get(prediction.id);
      } catch (err) {
        // A throttled or failing poll is tried again at the next delay, within the total timeout.
        if (err instanceof ReplicateRetryableAnswer) continue;
        await this.cancel(prediction.id);
        throw this.apiError(err);
      }
    }
    if (prediction.status === 'failed') {
      throw new ImageProviderError(scrub(String(prediction.error ?? 'the prediction failed')));
    }
    if (prediction.status === 'canceled') throw new ImageProviderError('the prediction was canceled');
    const out = Array.isArray(prediction.output) ? prediction.output[0] : prediction.output;
    if (typeof out !== 'string') throw new ImageProviderError('the prediction returned no image');
    // The download, too, ends with the total timeout.
    const deadline = AbortSignal.timeout(Math.max(1, this.settings.timeoutMs - (Date.now() - started)));
    const signal = req.signal ? AbortSignal.any([req.signal, deadline]) : deadline;
    try {
      const res = await fetch(out, { signal });
      if (!res.ok) throw new ImageProviderError(`the output could not be downloaded (HTTP ${res.status})`);
      return { bytes: await readCapped(res, this.settings.maxOutputBytes), inputTokens: 0, outputTokens: 0 };
    } catch (err) {
      if (err instanceof ImageProviderError) throw err;
      if (req.signal?.aborted) throw new ImageAbortedError('The caller went away');
      if (deadline.aborted) {
        throw new ImageProviderError(
          `timed out after ${Number((this.settings.timeoutMs / 1000).toFixed(1))} s`,
        );
      }
      throw new ImageProviderError(`the output could not be downloaded (${(err as Error).name})`);
    }
  }

  /** Waits for `work` at most `ms`, or until `signal` aborts; `work` itself is left running. */
  private settleWithin<T>(
    work: Promise<T>,
    ms: number,
    signal?: AbortSignal,
  ): Promise<
    { kind: 'settled'; value: T } | { kind: 'settled'; error: unknown } | { kind: 'timeout' | 'aborted' }
  > {
    return new Promise((resolve) => {
      const finish = (o: Parameters<typeof resolve>[0]) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        resolve(o);
      };
      const onAbort = () => finish({ kind: 'aborted' });
      const timer = setTimeout(() => finish({ kind: 'timeout' }), ms);
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      work.then(
        (value) => finish({ kind: 'settled', value }),
        (error: unknown) => finish({ kind: 'settled', error }),
      );
    });
  }

  private async cancel(id: string): Promise<void> {
    await this.client.predictions.cancel(id).catch(() => undefined);
  }

  private apiError(err: unknown): Error {
    if (err instanceof ReplicateRetryableAnswer) {
      const text = providerText(err.status, err.body);
      if (err.status === 429) return new ImageQuotaError(text);
      return new ImageProviderError(`HTTP ${err.status}: ${text}`);
    }
    const e = err as { response?: Response; message?: string };
    if (!e.response) return new ImageProviderError('the provider could not be reached');
    const status = e.response.status;
    // The client's message is "Request to <url> failed with status N <text>: <body>."
    const body = /failed with status \d+[^:]*: ([\s\S]*)\.$/.exec(e.message ?? '')?.[1] ?? '';
    const text = providerText(status, body);
    if (status === 402 || status === 429) return new ImageQuotaError(text);
    return new ImageProviderError(`HTTP ${status}: ${text}`);
  }
}

/** An OpenAI-compatible images API: `images.generate`, or `images.edit` with a source. */
export class OpenAIImageProvider implements ImageProvider {
  private readonly client: OpenAI;

  constructor(
    provider: { baseUrl?: string; apiKey?: string },
    private readonly settings: ImageProviderSettings,
  ) {
    this.client = new OpenAI({
      apiKey: provider.apiKey ?? 'unset',
      baseURL: provider.baseUrl,
      // An image costs real money: never send it twice on a retry.
      maxRetries: 0,
      timeout: settings.timeoutMs,
    });
  }

  async generate(req: ImageRequest): Promise<ImageResult> {
    let r: OpenAI.ImagesResponse;
    try {
      r = req.source
        ? await this.client.images.edit(
            {
              model: req.model.upstream,
              prompt: req.prompt,
              image: await toFile(req.source.bytes, `source.${req.source.mimeType.split('/')[1]}`, {
                type: req.source.mimeType,
              }),
            },
            { signal: req.signal },
          )
        : await this.client.images.generate(
            { model: req.model.upstream, prompt: req.prompt },
            { signal: req.signal },
          );
    } catch (err) {
      if (req.signal?.aborted) throw new ImageAbortedError('The caller went away');
      if (err instanceof OpenAI.APIError && err.status !== undefined) {
        const e = err as InstanceType<typeof OpenAI.APIError>;
        const body = e.error as { message?: unknown } | undefined;
        const text = scrub(typeof body?.message === 'string' ? body.message : `HTTP ${e.status}`);
        if (e.status === 429) throw new ImageQuotaError(text);
        throw new ImageProviderError(`HTTP ${e.status}: ${text}`);
      }
      if (err instanceof OpenAI.APIConnectionTimeoutError)
        throw new ImageProviderError('the provider timed out');
      throw new ImageProviderError('the provider could not be reached');
    }
    const b64 = r.data?.[0]?.b64_json;
    if (!b64) throw new ImageProviderError('the provider returned no image');
    const bytes = Buffer.from(b64, 'base64');
    if (bytes.length > this.settings.maxOutputBytes) {
      throw new ImageProviderError(`the provider's image exceeds ${this.settings.maxOutputBytes} bytes`);
    }
    return {
      bytes,
      inputTokens: r.usage?.input_tokens ?? 0,
      outputTokens: r.usage?.output_tokens ?? 0,
    };
  }
}
