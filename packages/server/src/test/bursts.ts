import { startFakeOpenAIImages, startFakeReplicate } from '@ai-suite/testkit';
import { createTestSession, type TestServer, type TestWorkspace } from './harness.js';

/**
 * Fixtures of the metering bursts (issue 18, decision 0020), shared by
 * `src/metering/bursts.test.ts` (N = 24) and `bench/metering-bursts` (N = 20, 200, 1000):
 * the artifact report the fake model answers, the image upstreams with their prices, and the
 * requests of the capabilities whose setup is more than one call (images, document QA).
 */

const words = (n: number) => Array.from({ length: n }, (_, i) => `word${i}`).join(' ');

/** A report `POST /artifacts/generate` validates: the fake model's reply to `response_format`. */
export const ARTIFACT_REPORT = JSON.stringify({
  executiveSummary: words(150),
  insights: [
    {
      title: 'Adoption doubled',
      body: 'Active users went from 40 to 80.',
      category: 'key_development',
      evidence: Array.from({ length: 14 }, (_, i) => `e${i}`),
    },
  ],
  followUpConsiderations: [
    { title: 'Check churn', body: 'Watch the next cycle.', attentionLevel: 'moderate' },
  ],
  confidenceNotes: 'Based on 3 samples.',
});

/** The two image models of the bursts: priced per image, and per image plus tokens. */
export const BURST_IMAGE_MODELS = ['scan-gen', 'gpt-image-1'] as const;
export type BurstImageModel = (typeof BURST_IMAGE_MODELS)[number];

export interface ImageUpstreams {
  /** Server environment for both models. */
  env: Record<string, string>;
  close(): Promise<void>;
}

/**
 * The image upstreams on loopback: a fake Replicate serving `acme/scan-gen` (model id
 * `scan-gen`) priced `perImage` USD an image, and a fake OpenAI images API serving a
 * gpt-image-like model priced `altPerImage` an image plus $5 / $40 per million input / output
 * tokens (the fake reports 272 output tokens an image).
 */
export async function startImageUpstreams(prices: {
  perImage: string;
  altPerImage: string;
}): Promise<ImageUpstreams> {
  const replicate = await startFakeReplicate({ token: 'r8_test' });
  const images = await startFakeOpenAIImages({ apiKey: 'sk-images' });
  return {
    env: {
      IMAGE_MODEL: 'acme/scan-gen',
      IMAGE_MODEL_ID: 'scan-gen',
      IMAGE_MODEL_PRICE_PER_IMAGE: prices.perImage,
      REPLICATE_BASE_URL: replicate.baseUrl,
      REPLICATE_API_TOKEN: 'r8_test',
      IMAGE_ALT_MODEL: 'gpt-image-1',
      IMAGE_ALT_BASE_URL: images.baseUrl,
      IMAGE_ALT_API_KEY: 'sk-images',
      IMAGE_ALT_MODEL_PRICE_PER_IMAGE: prices.altPerImage,
      IMAGE_ALT_INPUT_PRICE_PER_MTOK: '5',
      IMAGE_ALT_OUTPUT_PRICE_PER_MTOK: '40',
      IMAGE_PREFER_WAIT_SECONDS: '1',
      IMAGE_POLL_INITIAL_MS: '5',
      IMAGE_POLL_MAX_MS: '20',
    },
    async close() {
      await replicate.close();
      await images.close();
    },
  };
}

/** The outcome of one request, with its `X-Request-Id` (its usage records carry it). */
export interface BurstResult {
  outcome: 'completed' | 'refused' | 'failed';
  requestId: string;
  status: number;
}

/** One image on `model`: 200 completed, 402 refused, anything else failed. */
export async function requestImage(
  ts: TestServer,
  key: string,
  model: BurstImageModel,
): Promise<BurstResult> {
  const res = await ts.api('/image', {
    method: 'POST',
    key,
    json:
      model === 'gpt-image-1'
        ? { profile: 'ultrasound', provider: 'openai', operation: 'generate', prompt: 'a heart' }
        : { prompt: 'a kidney in long axis, high contrast', model },
  });
  await res.text();
  const requestId = res.headers.get('x-request-id') ?? '';
  const outcome = res.status === 200 ? 'completed' : res.status === 402 ? 'refused' : 'failed';
  return { outcome, requestId, status: res.status };
}

/**
 * Document QA on `ws`: a person signed in to it (document QA takes a session, not an API key)
 * uploads a small manual (indexed before the upload answers); returns a function asking one
 * question about it (query embedding, then an answer from the sources).
 */
export async function indexedDocumentQA(
  ts: TestServer,
  ws: TestWorkspace,
): Promise<() => Promise<BurstResult>> {
  const session = await createTestSession(ts, ws);
  const fd = new FormData();
  fd.append('workspace_id', ws.workspaceId);
  fd.append(
    'files[]',
    new Blob(
      [
        '# Kettle manual\n\nThe warranty of the blue kettle lasts seven years from the date of purchase. ' +
          'Descaling should be done every month in hard water areas.\n',
      ],
      { type: 'text/markdown' },
    ),
    'manual.md',
  );
  const up = await ts.api('/rag/upload', { method: 'POST', key: session.token, body: fd });
  const upBody = await up.text();
  if (up.status !== 200) throw new Error(`document upload answered ${up.status}: ${upBody.slice(0, 200)}`);
  return async () => {
    const res = await ts.api('/rag/query', {
      method: 'POST',
      key: session.token,
      json: { query: 'How long does the warranty of the blue kettle last?', workspace_id: ws.workspaceId },
    });
    const body = await res.text();
    const requestId = res.headers.get('x-request-id') ?? '';
    if (res.status === 402) return { outcome: 'refused', requestId, status: res.status };
    // An answer generated from the sources (not the "not found" answer without a model call).
    const ok = res.status === 200 && JSON.parse(body).usage?.output_tokens > 0;
    return { outcome: ok ? 'completed' : 'failed', requestId, status: res.status };
  };
}
