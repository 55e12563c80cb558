import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildOpenApiDocument } from '../openapi.js';
import { appRouter } from '../router.js';
import { rawRouteModules } from '../routes.js';
import { startTestServer, type TestServer } from '../test/harness.js';
import { SERVER_DIR } from '../test/spawn.js';
import type { Meta } from '../trpc.js';

interface Operation {
  responses?: Record<string, { content?: Record<string, { schema?: { $ref?: string } }> }>;
}
type Doc = {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components?: { schemas?: Record<string, unknown> };
};

let ts: TestServer;
let doc: Doc;
beforeAll(async () => {
  ts = await startTestServer();
  const res = await fetch(`${ts.url}/api/v1/openapi.json`);
  expect(res.status).toBe(200);
  doc = (await res.json()) as Doc;
});
afterAll(() => ts?.close());

/** Every operation the code defines: tRPC procedures with openapi meta, and raw routes. */
function definedOperations(): { method: string; path: string; status?: number; from: string }[] {
  const ops: { method: string; path: string; status?: number; from: string }[] = [];
  const procs = (appRouter._def as unknown as { procedures: Record<string, { _def: { meta?: Meta } }> })
    .procedures;
  for (const [name, proc] of Object.entries(procs)) {
    const meta = proc._def.meta;
    // Every procedure of the API router is a REST operation: one without meta would be unreachable.
    expect(meta?.openapi, `procedure ${name} has no openapi meta`).toBeDefined();
    if (!meta?.openapi) continue;
    ops.push({
      method: meta.openapi.method.toLowerCase(),
      path: meta.openapi.path,
      status: meta.status,
      from: name,
    });
  }
  for (const mod of rawRouteModules) {
    for (const [p, item] of Object.entries(mod.openapi)) {
      for (const method of Object.keys(item as object)) {
        if (['get', 'post', 'put', 'patch', 'delete'].includes(method))
          ops.push({ method, path: p, from: mod.name });
      }
    }
  }
  return ops;
}

describe('GET /api/v1/openapi.json', () => {
  it('is OpenAPI 3.1 and lists every procedure and raw route, with its success status', () => {
    expect(doc.openapi).toBe('3.1.0');
    const ops = definedOperations();
    expect(ops.length).toBeGreaterThanOrEqual(4); // me + the three catalogs at least
    for (const op of ops) {
      const operation = doc.paths[op.path]?.[op.method];
      expect(operation, `${op.method.toUpperCase()} ${op.path} (${op.from}) missing`).toBeDefined();
      if (op.status) expect(Object.keys(operation?.responses ?? {}), op.from).toContain(String(op.status));
    }
    // ...and nothing else: the document has no operation the code does not define.
    const documented = Object.entries(doc.paths).flatMap(([p, item]) =>
      Object.keys(item).map((m) => `${m} ${p}`),
    );
    expect(documented.sort()).toEqual(ops.map((o) => `${o.method} ${o.path}`).sort());
  });

  it('references the one ErrorBody schema from every error response', () => {
    expect(doc.components?.schemas?.ErrorBody).toMatchObject({
      type: 'object',
      required: ['error'],
      properties: { error: { type: 'string' } },
    });
    let errorResponses = 0;
    for (const [p, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        for (const [status, resp] of Object.entries(op.responses ?? {})) {
          if (status !== 'default' && Number(status) < 400) continue;
          errorResponses++;
          expect(resp.content?.['application/json']?.schema, `${method} ${p} ${status}`).toEqual({
            $ref: '#/components/schemas/ErrorBody',
          });
        }
      }
    }
    expect(errorResponses).toBeGreaterThan(0);
  });

  it('is the committed docs/openapi.json (run `pnpm openapi` after changing routes)', () => {
    const committed = JSON.parse(fs.readFileSync(path.join(SERVER_DIR, '../../docs/openapi.json'), 'utf8'));
    expect(committed).toEqual(JSON.parse(JSON.stringify(buildOpenApiDocument())));
    expect(doc).toEqual(committed);
  });
});

describe('limits in words', () => {
  it('every limited request field and parameter says its limit in its description', () => {
    const op = (p: string, m: string): any => (doc.paths as any)[p][m];
    const body = (p: string, m: string): any => op(p, m).requestBody.content['application/json'].schema;
    const chat = body('/apps/{appId}/chat/message', 'post');
    expect(chat.properties.message.description).toBe('1 to 2000 characters.');
    expect(chat.properties.role.description).toMatch(/^Who is writing.*\. 1 to 64 characters\.$/);
    const save = body('/apps/{appId}/memory/save-messages', 'post');
    expect(save.properties.messages.description).toMatch(/1 to 100 items/);
    const threads: any[] = op('/apps/{appId}/memory/threads', 'get').parameters;
    expect(threads.find((p) => p.name === 'limit')?.description).toMatch(/100/);
    // A description that already states the limit is left as it is.
    const list: any[] = op('/managed-agents/agents/{agentId}/sessions', 'get').parameters;
    const limit = list.find((p) => p.name === 'limit')?.description as string;
    expect(limit.match(/100/g)?.length).toBe(1);
  });
});
