import { existsSync } from 'node:fs';
import path from 'node:path';
import express, { type Router } from 'express';
import helmet from 'helmet';
import { appError } from '../errors/index.js';
import { sendError } from './errors.js';

/** Paths the console never answers: the API, its second mount, the docs and the probes. */
const NOT_CONSOLE = /^\/(api|console-api|docs|healthz|readyz)(\/|$)/;

/**
 * The console's Content-Security-Policy: everything from this origin only, no inline script
 * (Vite's build emits none), no third-party host, no framing. `blob:` and `data:` images are the
 * storage previews the console renders from fetched bytes.
 */
export const CONSOLE_CSP = {
  useDefaults: false,
  directives: {
    defaultSrc: ["'self'"],
    scriptSrc: ["'self'"],
    styleSrc: ["'self'"],
    imgSrc: ["'self'", 'data:', 'blob:'],
    fontSrc: ["'self'"],
    connectSrc: ["'self'"],
    objectSrc: ["'none'"],
    baseUri: ["'self'"],
    formAction: ["'self'"],
    frameAncestors: ["'none'"],
  },
};

/**
 * Whether the request asks for an HTML page by name: browsers' navigations list `text/html`;
 * a wildcard alone (curl, scrapers, monitoring probes such as a `GET /metrics`) does not count, so
 * they get the JSON 404 instead of a 200 page they cannot use.
 */
export function acceptsHtml(accept: string | undefined): boolean {
  if (!accept) return false;
  return accept.split(',').some((part) => {
    const [type, ...params] = part.trim().toLowerCase().split(';');
    if (type?.trim() !== 'text/html' && type?.trim() !== 'application/xhtml+xml') return false;
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    return q === undefined || Number(q.slice(2)) > 0;
  });
}

/**
 * Serves the web console (`packages/console`'s build) at `/`: hashed files under `/assets`
 * cached for a year as immutable, everything else revalidated, and `index.html` for any other
 * GET outside the API that accepts `text/html` (the single-page app routes in the browser);
 * other clients get the JSON 404 there. Without a build, those
 * paths answer 503 naming the command that makes one.
 */
export function consoleRouter(dir: string): Router {
  const router = express.Router();
  router.use(helmet({ contentSecurityPolicy: CONSOLE_CSP, crossOriginEmbedderPolicy: false }));
  const index = path.join(dir, 'index.html');
  router.use(
    '/assets',
    express.static(path.join(dir, 'assets'), {
      immutable: true,
      maxAge: '365d',
      index: false,
    }),
    (_req, res) => sendError(res, appError('NOT_FOUND')),
  );
  router.use(
    express.static(dir, {
      index: false,
      setHeaders: (res) => res.setHeader('Cache-Control', 'no-cache'),
    }),
  );
  router.use((req, res, next) => {
    if ((req.method !== 'GET' && req.method !== 'HEAD') || NOT_CONSOLE.test(req.path)) return next();
    // A missing file (an extension in the last segment) is a 404, not the app.
    if (/\.[A-Za-z0-9]+$/.test(req.path)) return next();
    // The answer depends on Accept: shared caches must not hand the page to a JSON client.
    res.vary('Accept');
    if (!acceptsHtml(req.get('accept'))) return next();
    if (!existsSync(index)) {
      sendError(res, appError('CONSOLE_NOT_BUILT'));
      return;
    }
    res.setHeader('Cache-Control', 'no-cache');
    res.sendFile(index);
  });
  return router;
}
