import { createRequire } from 'node:module';
import express, { type Router } from 'express';

const require = createRequire(import.meta.url);

/** `/docs`: Swagger UI from the installed swagger-ui-dist package (no CDN), reading our document. */
export function docsRouter(specUrl: string): Router {
  const r = express.Router();
  // The package's index loads its 3.4 MB browser bundle into this process; only the path is needed.
  const getAbsoluteFSPath = require('swagger-ui-dist/absolute-path.js') as () => string;
  r.get('/', (req, res, next) => {
    if (!req.originalUrl.endsWith('/')) return res.redirect(301, `${req.originalUrl}/`);
    res.type('html').send(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>AI Suite API reference</title>
<link rel="stylesheet" href="./swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="./swagger-ui-bundle.js"></script>
<script src="./init.js"></script></body></html>`);
    void next;
  });
  r.get('/init.js', (_req, res) => {
    res
      .type('application/javascript')
      .send(
        `window.ui = SwaggerUIBundle({ url: ${JSON.stringify(specUrl)}, dom_id: '#swagger-ui', deepLinking: true });`,
      );
  });
  r.use(express.static(getAbsoluteFSPath(), { index: false }));
  return r;
}
