import { existsSync } from 'node:fs';
import path from 'node:path';
import express, { type Router } from 'express';
import helmet from 'helmet';
import { AppError, sendError } from './errors.js';

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
 * Serves the web console (`packages/console`'s build) at `/`: hashed files under `/assets`
 * cached for a year as immutable, everything else revalidated, and `index.html` for any other
 * GET outside the API (the single-page app routes in the browser). Without a build, those
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
    (_req, res) => sendError(res, new AppError(404, 'Not found', 'NOT_FOUND')),
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
    if (!existsSync(index)) {
      sendError(res, new AppError(503, 'The web console is not built: run pnpm build', 'CONSOLE_NOT_BUILT'));
      return;
    }
    res.setHeader('Cache-Control', 'no-cache');
    res.sendFile(index);
  });
  return router;
}
