import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestWorkspace,
  startTestServer,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';

let ts: TestServer;
let ws: TestWorkspace;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-models-'));

beforeAll(async () => {
  const file = path.join(dir, 'models.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      providers: [{ id: 'up', baseUrl: 'http://127.0.0.1:9/v1' }],
      models: [
        { id: 'small', provider: 'up', contextWindow: 8192, inputPricePerMTok: 0.1, outputPricePerMTok: 0.4 },
        {
          id: 'large',
          provider: 'up',
          upstream: 'vendor/large-2026',
          contextWindow: 200000,
          inputPricePerMTok: 3,
          outputPricePerMTok: 15,
          default: true,
        },
        { id: 'retired', provider: 'up', active: false },
        { id: 'embed', provider: 'up', kind: 'embedding', contextWindow: 8192, inputPricePerMTok: 0.02 },
        { id: 'pics', provider: 'up', kind: 'image', pricePerImage: 0.04 },
      ],
    }),
  );
  ts = await startTestServer({ env: { MODELS_FILE: file } });
  ws = await createTestWorkspace(ts, { creditsUsd: '1' });
});
afterAll(async () => {
  await ts?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('GET /models', () => {
  it('lists the active models with kind, context window, prices and the default of each kind', async () => {
    const res = await ts.api('/models', { key: ws.apiKey });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      models: [
        {
          id: 'small',
          kind: 'chat',
          contextWindow: 8192,
          inputPricePerMTok: 0.1,
          outputPricePerMTok: 0.4,
          pricePerImage: null,
          default: false,
        },
        {
          id: 'large',
          kind: 'chat',
          contextWindow: 200000,
          inputPricePerMTok: 3,
          outputPricePerMTok: 15,
          pricePerImage: null,
          default: true,
        },
        {
          id: 'embed',
          kind: 'embedding',
          contextWindow: 8192,
          inputPricePerMTok: 0.02,
          outputPricePerMTok: 0,
          pricePerImage: null,
          default: true,
        },
        {
          id: 'pics',
          kind: 'image',
          contextWindow: 128000,
          inputPricePerMTok: 0,
          outputPricePerMTok: 0,
          pricePerImage: 0.04,
          default: true,
        },
      ],
    });
    // Upstream names and providers stay internal.
    expect(JSON.stringify(await (await ts.api('/models', { key: ws.apiKey })).json())).not.toContain(
      'vendor/',
    );
  });

  it('filters by kind; 400 for an unknown kind; 401 without a key', async () => {
    const chat = (await (await ts.api('/models?kind=chat', { key: ws.apiKey })).json()) as {
      models: { id: string }[];
    };
    expect(chat.models.map((m) => m.id)).toEqual(['small', 'large']);
    const bad = await ts.api('/models?kind=video', { key: ws.apiKey });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toBe(
      'kind must be one of: chat, embedding, image',
    );
    const anon = await ts.api('/models');
    expect(anon.status).toBe(401);
    expect(await anon.json()).toEqual({ error: 'Invalid API key' });
  });

  it('Invalid model names the ids a caller may pass (an inactive one is not among them)', async () => {
    for (const model of ['retired', 'embed', 'nope']) {
      const res = await ts.api('/managed-agents/agents', {
        method: 'POST',
        key: ws.apiKey,
        json: { name: 'A', llm: { componentId: model } },
      });
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({
        error: 'Invalid model',
        code: 'INVALID_MODEL',
        details: { model, kind: 'chat', validModels: ['small', 'large'] },
      });
    }
  });
});
