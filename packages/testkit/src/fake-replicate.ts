import { randomBytes } from 'node:crypto';
import type http from 'node:http';
import { fakeEdit, parseDataUri, seedOf, syntheticScanPng } from './images.js';
import { type ListeningServer, listen } from './listen.js';

/**
 * A fake of Replicate's predictions API (`/v1`), speaking the real wire protocol so the
 * `replicate` npm client is exercised end to end (`baseUrl` pointed here):
 *
 * - `POST /v1/models/{owner}/{name}/predictions` and `POST /v1/predictions` (`version`) create
 *   a prediction; `Prefer: wait` / `wait=N` holds the answer until it is terminal (or N s).
 * - `GET /v1/predictions/{id}` polls it: `starting` → `processing` → `succeeded` after
 *   `pollsBeforeDone` polls, or `failed` / `canceled`.
 * - `POST /v1/predictions/{id}/cancel` cancels it.
 * - Outputs are PNG URLs served by the fake itself (`GET /files/{id}.png`, no auth, as
 *   Replicate's delivery URLs).
 * - Quota mode answers creates like Replicate's billing and throttling refusals.
 *
 * Generation draws a synthetic speckled scan seeded by the prompt; an edit (an `image` input as
 * a data URI or a URL this fake serves) returns the source turned grey and brightened.
 */

export type FakePredictionStatus = 'starting' | 'processing' | 'succeeded' | 'failed' | 'canceled';

export interface FakePrediction {
  id: string;
  model: string;
  version: string | null;
  input: Record<string, unknown>;
  status: FakePredictionStatus;
  output: string[] | null;
  error: string | null;
  logs: string;
  created_at: string;
  started_at: string | null;
  completed_at: string | null;
  /** Polls seen so far (GET /v1/predictions/{id}). */
  polls: number;
  /** Whether the create carried `Prefer: wait`. */
  preferWait: string | null;
}

export interface FakeReplicateBehaviour {
  /** Polls before the prediction completes (default 0: complete at creation). */
  pollsBeforeDone?: number;
  /** Complete as `failed` with this error text. */
  fail?: string;
  /** Never complete (until canceled). */
  hang?: boolean;
  /**
   * Refuse creates like Replicate's billing (402 `Insufficient credit`) or throttling (429)
   * answers, with this detail text.
   */
  quota?: { status: 402 | 429; detail: string };
  /** Delay before answering a create, ms. */
  createDelayMs?: number;
  /**
   * Create the prediction at once but hold the create's answer this long, ms: a create that
   * stalls on the network after Replicate has accepted it (the caller cannot know the id yet).
   */
  createAnswerDelayMs?: number;
  /** Answer the first N polls of each prediction with 429 (throttled), as Replicate may. */
  throttlePolls?: number;
}

export interface FakeReplicateOptions extends FakeReplicateBehaviour {
  /** Required bearer token (default: any non-empty token). */
  token?: string;
  /** Port on 127.0.0.1 (default: a free one). */
  port?: number;
}

export interface FakeReplicate extends ListeningServer {
  /** `baseUrl` for the `replicate` client: `<url>/v1`. */
  baseUrl: string;
  predictions: Map<string, FakePrediction>;
  /** Every request seen (method, path, headers, parsed body). */
  requests: { method: string; path: string; headers: http.IncomingHttpHeaders; body: any }[];
  /** Changes the behaviour of predictions created from now on. */
  set(behaviour: FakeReplicateBehaviour): void;
  /** Bytes of an output the fake serves, by URL. */
  outputBytes(url: string): Buffer | undefined;
}

const now = () => new Date().toISOString();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const TERMINAL = new Set<FakePredictionStatus>(['succeeded', 'failed', 'canceled']);

async function readBody(req: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export async function startFakeReplicate(opts: FakeReplicateOptions = {}): Promise<FakeReplicate> {
  let behaviour: FakeReplicateBehaviour = { ...opts };
  const predictions = new Map<string, FakePrediction>();
  const behaviours = new Map<string, FakeReplicateBehaviour>();
  const files = new Map<string, Buffer>();
  const waiters = new Map<string, Set<() => void>>();
  const requests: FakeReplicate['requests'] = [];
  let base = '';

  const notify = (id: string) => {
    for (const w of waiters.get(id) ?? []) w();
    waiters.delete(id);
  };

  const sourceBytes = async (image: unknown): Promise<Buffer | undefined> => {
    if (typeof image !== 'string') return undefined;
    const data = parseDataUri(image);
    if (data) return data.bytes;
    return files.get(image);
  };

  const complete = async (p: FakePrediction) => {
    const b = behaviours.get(p.id) ?? {};
    if (TERMINAL.has(p.status)) return;
    if (b.fail) {
      p.status = 'failed';
      p.error = b.fail;
    } else {
      try {
        const src = await sourceBytes(p.input.image);
        const width = Number(p.input.width) || 64;
        const height = Number(p.input.height) || 64;
        const png = src
          ? await fakeEdit(src)
          : await syntheticScanPng({ width, height, seed: seedOf(String(p.input.prompt ?? '')) });
        const url = `${base}/files/${p.id}.png`;
        files.set(url, png);
        p.output = [url];
        p.status = 'succeeded';
        p.logs += 'done\n';
      } catch (err) {
        p.status = 'failed';
        p.error = `Could not read the input image: ${(err as Error).message}`;
      }
    }
    p.completed_at = now();
    notify(p.id);
  };

  const json = (res: http.ServerResponse, status: number, body: unknown) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  };
  const problem = (res: http.ServerResponse, status: number, title: string, detail: string) =>
    json(res, status, { title, detail, status });

  const view = (p: FakePrediction) => {
    const { polls: _p, preferWait: _w, ...rest } = p;
    return {
      ...rest,
      data_removed: false,
      source: 'api',
      urls: {
        get: `${base}/v1/predictions/${p.id}`,
        cancel: `${base}/v1/predictions/${p.id}/cancel`,
        web: `${base}/p/${p.id}`,
      },
      metrics: p.completed_at ? { predict_time: 0.01 } : {},
    };
  };

  const waitFor = (p: FakePrediction, seconds: number, req: http.IncomingMessage) =>
    new Promise<void>((resolve) => {
      if (TERMINAL.has(p.status)) return resolve();
      const set = waiters.get(p.id) ?? new Set();
      waiters.set(p.id, set);
      const done = () => {
        clearTimeout(timer);
        set.delete(done);
        resolve();
      };
      const timer = setTimeout(done, seconds * 1000);
      set.add(done);
      req.once('close', done);
    });

  const server = await listen(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    const path = url.pathname;
    const raw = req.method === 'POST' ? await readBody(req) : '';
    let body: any;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      body = raw;
    }
    requests.push({ method: req.method ?? 'GET', path, headers: req.headers, body });

    if (req.method === 'GET' && path.startsWith('/files/')) {
      const bytes = files.get(`${base}${path}`);
      if (!bytes) return problem(res, 404, 'Not found', 'No such file');
      res.writeHead(200, { 'content-type': 'image/png', 'content-length': bytes.length });
      res.end(bytes);
      return;
    }

    const auth = req.headers.authorization ?? '';
    const token = auth.startsWith('Bearer ') ? auth.slice(7) : '';
    if (!token || (opts.token !== undefined && token !== opts.token)) {
      return problem(res, 401, 'Unauthenticated', 'You did not pass a valid authentication token');
    }

    const create =
      req.method === 'POST' &&
      (path === '/v1/predictions' || /^\/v1\/models\/[^/]+\/[^/]+\/predictions$/.test(path));
    if (create) {
      const b = { ...behaviour };
      if (b.createDelayMs) await sleep(b.createDelayMs);
      if (b.quota) {
        const title = b.quota.status === 402 ? 'Insufficient credit' : 'Request was throttled';
        return problem(res, b.quota.status, title, b.quota.detail);
      }
      if (!body || typeof body !== 'object' || typeof body.input !== 'object' || body.input === null) {
        return problem(res, 422, 'Input validation failed', 'input is required');
      }
      const model = path === '/v1/predictions' ? 'unknown' : path.split('/').slice(3, 5).join('/');
      const id = randomBytes(10).toString('hex');
      const p: FakePrediction = {
        id,
        model,
        version: typeof body.version === 'string' ? body.version : null,
        input: body.input,
        status: 'starting',
        output: null,
        error: null,
        logs: '',
        created_at: now(),
        started_at: null,
        completed_at: null,
        polls: 0,
        preferWait: (req.headers.prefer as string | undefined) ?? null,
      };
      predictions.set(id, p);
      behaviours.set(id, b);
      if (!b.hang && !(b.pollsBeforeDone && b.pollsBeforeDone > 0)) await complete(p);
      const prefer = /^wait(?:=(\d+))?$/.exec(String(req.headers.prefer ?? '').trim());
      if (prefer && !TERMINAL.has(p.status)) await waitFor(p, Math.min(60, Number(prefer[1] ?? 60)), req);
      if (b.createAnswerDelayMs) await sleep(b.createAnswerDelayMs);
      return json(res, 201, view(p));
    }

    const get = /^\/v1\/predictions\/([^/]+)$/.exec(path);
    if (get && req.method === 'GET') {
      const p = predictions.get(get[1] ?? '');
      if (!p) return problem(res, 404, 'Not found', 'The requested resource could not be found.');
      p.polls++;
      const b = behaviours.get(p.id) ?? {};
      if (b.throttlePolls && p.polls <= b.throttlePolls) {
        return problem(
          res,
          429,
          'Request was throttled',
          'Request was throttled. Expected available in 1 second.',
        );
      }
      if (!TERMINAL.has(p.status)) {
        p.status = 'processing';
        p.started_at ??= now();
        if (!b.hang && p.polls >= (b.pollsBeforeDone ?? 0)) await complete(p);
      }
      return json(res, 200, view(p));
    }

    const cancel = /^\/v1\/predictions\/([^/]+)\/cancel$/.exec(path);
    if (cancel && req.method === 'POST') {
      const p = predictions.get(cancel[1] ?? '');
      if (!p) return problem(res, 404, 'Not found', 'The requested resource could not be found.');
      if (!TERMINAL.has(p.status)) {
        p.status = 'canceled';
        p.completed_at = now();
        notify(p.id);
      }
      return json(res, 200, view(p));
    }

    return problem(res, 404, 'Not found', 'The requested resource could not be found.');
  }, opts.port);
  base = server.url;

  return {
    ...server,
    baseUrl: `${server.url}/v1`,
    predictions,
    requests,
    set(b) {
      behaviour = { ...b };
    },
    outputBytes: (u) => files.get(u),
  };
}
