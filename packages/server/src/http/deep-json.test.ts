import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildOpenApiDocument } from '../openapi.js';
import {
  createTestWorkspace,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../test/harness.js';
import { assertJsonDepth, MAX_JSON_DEPTH } from './json-body.js';

let ts: TestServer;
let ws: TestWorkspace;
beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts, { creditsUsd: '5' });
});
afterAll(() => ts?.close());

type Operation = { requestBody?: { content?: Record<string, unknown> } };

/** Every operation of the document that takes a JSON body, with its path parameters filled in. */
function jsonOperations(): { method: string; path: string }[] {
  const doc = buildOpenApiDocument() as unknown as { paths: Record<string, Record<string, Operation>> };
  const out: { method: string; path: string }[] = [];
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      if (!op.requestBody?.content?.['application/json']) continue;
      const filled = path
        .replace('{workspaceId}', ws.workspaceId)
        .replace(/\{[^}]+\}/g, '00000000-0000-4000-8000-000000000000');
      out.push({ method: method.toUpperCase(), path: filled });
    }
  }
  return out;
}

/** `{"a":{"a":…}}` nested `depth` levels, and the same with arrays. */
const nestedObject = (depth: number) => `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
const nestedArray = (depth: number) => `{"a":${'['.repeat(depth)}${']'.repeat(depth)}}`;

describe('JSON bodies nested too deep', () => {
  it('answer 400 on every JSON route, before any work', async () => {
    const ops = jsonOperations();
    expect(ops.length).toBeGreaterThan(20);
    for (const { method, path } of ops) {
      for (const body of [nestedObject(10_000), nestedArray(10_000)]) {
        const res = await ts.api(path, {
          method,
          key: ws.apiKey,
          headers: { 'content-type': 'application/json' },
          body,
        });
        const text = await res.text();
        expect(res.status, `${method} ${path}: ${text.slice(0, 200)}`).toBe(400);
        const { error } = JSON.parse(text);
        if (path.startsWith('/openai/')) {
          // The OpenAI-compatible surface answers in OpenAI's shape (docs/openai-compatible.md).
          expect(error, `${method} ${path}`).toMatchObject({
            type: 'invalid_request_error',
            code: 'invalid_json',
          });
        } else {
          expect(error, `${method} ${path}`).toMatch(/^(Invalid request body|Invalid input)/);
        }
      }
    }
    // Nothing was created by any of them.
    for (const list of ['/managed-agents/agents', '/apps', '/widget-tokens']) {
      const res = await ts.api(list, { key: ws.apiKey });
      if (res.status === 404) continue;
      const body = (await res.json()) as Record<string, unknown>;
      const items = Object.values(body).find(Array.isArray) as unknown[] | undefined;
      expect(items ?? [], list).toEqual([]);
    }
  });

  it(`accepts ${MAX_JSON_DEPTH} levels and refuses one more`, async () => {
    expect(() => assertJsonDepth(JSON.parse(nestedObject(MAX_JSON_DEPTH)))).not.toThrow();
    expect(() => assertJsonDepth(JSON.parse(nestedObject(MAX_JSON_DEPTH + 1)))).toThrow(
      'Invalid request body',
    );
    const at = (depth: number) =>
      ts.api('/apps', {
        method: 'POST',
        key: ws.apiKey,
        headers: { 'content-type': 'application/json' },
        body: `{"name":"deep-${depth}","metadata":${nestedObject(depth - 1)}}`,
      });
    const ok = await at(MAX_JSON_DEPTH);
    expect(ok.status).toBe(201);
    const refused = await at(MAX_JSON_DEPTH + 1);
    expect(refused.status).toBe(400);
    expect(await refused.json()).toEqual({
      error: 'Invalid request body',
      details: { maxDepth: MAX_JSON_DEPTH },
    });
  });
});
