/**
 * A tiny server for the chat widget example: it stands for the integrator's backend. It holds
 * the API key (never sent to the browser), mints a short-lived widget token bound to its own
 * origin for each page load, and serves the static page with the widget script bundled.
 *
 *   AI_SUITE_API_KEY=svc_ai_… pnpm --filter @ai-suite/example-chat-widget start   (APP_ID=… reuses an app)
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as esbuild from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));

export interface ChatWidgetServerOptions {
  /** The AI Suite server, e.g. `http://localhost:8080`. */
  apiBaseURL: string;
  apiKey: string;
  appId: string;
  port?: number;
  host?: string;
}

export interface ChatWidgetServer {
  url: string;
  close(): Promise<void>;
}

/** Bundles the widget script for the browser (the SDK is built `platform: neutral`). */
async function bundleWidget(): Promise<string> {
  const result = await esbuild.build({
    entryPoints: [path.join(here, 'public/widget.ts')],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    // In this monorepo the SDK is bundled from source; an app would use the published package.
    alias: { '@ai-suite/sdk': path.join(here, '../../packages/sdk/src/index.ts') },
    logLevel: 'silent',
  });
  return result.outputFiles[0]?.text ?? '';
}

const api = (base: string) => `${base.replace(/\/+$/, '').replace(/\/api\/v1$/, '')}/api/v1`;

export async function startChatWidgetServer(opts: ChatWidgetServerOptions): Promise<ChatWidgetServer> {
  const script = await bundleWidget();
  const page = fs.readFileSync(path.join(here, 'public/index.html'), 'utf8');
  let origin = '';

  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    try {
      if (req.method === 'GET' && (url.pathname === '/' || url.pathname === '/index.html')) {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end(page);
      } else if (req.method === 'GET' && url.pathname === '/widget.js') {
        res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8' });
        res.end(script);
      } else if (req.method === 'GET' && url.pathname === '/widget-config') {
        // Server to server, with the API key: a token for this app, this origin, 15 minutes.
        const r = await fetch(`${api(opts.apiBaseURL)}/widget-tokens`, {
          method: 'POST',
          headers: { authorization: `Bearer ${opts.apiKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            appId: opts.appId,
            allowedOrigins: [origin],
            ttlSeconds: 900,
            maxRequests: 200,
          }),
        });
        const body = (await r.json()) as { token?: string; error?: string };
        if (!r.ok || !body.token) throw new Error(body.error ?? `widget token: HTTP ${r.status}`);
        res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
        res.end(JSON.stringify({ token: body.token, appId: opts.appId, baseURL: opts.apiBaseURL }));
      } else {
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('not found');
      }
    } catch (err) {
      res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: String((err as Error).message ?? err) }));
    }
  });
  const host = opts.host ?? '127.0.0.1';
  await new Promise<void>((resolve) => server.listen(opts.port ?? 0, host, resolve));
  const { port } = server.address() as AddressInfo;
  origin = `http://${host}:${port}`;
  return {
    url: origin,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Creates an app for the widget (server to server, with the API key). */
async function createApp(apiBaseURL: string, apiKey: string): Promise<string> {
  const r = await fetch(`${api(apiBaseURL)}/apps`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'Chat widget example', systemPrompt: 'You are a friendly shop assistant.' }),
  });
  const body = (await r.json()) as { app?: { id: string }; error?: string };
  if (!r.ok || !body.app) throw new Error(body.error ?? `create app: HTTP ${r.status}`);
  return body.app.id;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  parseArgs({ allowPositionals: true }); // takes no arguments; a stray `--` is harmless
  const apiKey = process.env.AI_SUITE_API_KEY;
  if (!apiKey) {
    process.stderr.write('Set AI_SUITE_API_KEY (and AI_SUITE_BASE_URL, default http://localhost:8080)\n');
    process.exit(1);
  }
  const apiBaseURL = process.env.AI_SUITE_BASE_URL ?? 'http://localhost:8080';
  const appId = process.env.APP_ID || (await createApp(apiBaseURL, apiKey));
  const srv = await startChatWidgetServer({
    apiBaseURL,
    apiKey,
    appId,
    port: Number(process.env.PORT ?? 5173),
  });
  process.stdout.write(`chat widget for app ${appId} on ${srv.url}\n`);
}
