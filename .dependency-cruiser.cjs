/**
 * The server's layers, enforced (docs/architecture.md, decision 0046). Run by `pnpm lint`.
 *
 *   composition root (app.ts, server.ts, main.ts, router.ts, raw-routes registry, cli/)
 *     → http/ (transport) and domains/ (product features)
 *       → core: auth/, metering/, runs/, providers/, generation/, telemetry/, db/, storage/
 *         → foundation: errors/, util/, config.ts, logger.ts, bounded-map.ts, data-dir.ts
 *
 * A layer imports only the layers below it. Route files of a domain (router.ts, routes.ts,
 * *-routes.ts) are the domain's transport adapters and may use http/; no other domain file may.
 */
const SRC = '^packages/server/src/';
const CORE = `${SRC}(auth|metering|runs|providers|generation|telemetry|db|storage)/`;
const DOMAINS = `${SRC}domains/`;
const HTTP = `${SRC}http/`;
const FOUNDATION = `${SRC}(errors/|util/|config\\.ts$|logger\\.ts$|bounded-map\\.ts$|data-dir\\.ts$)`;
const TESTS = '(\\.test\\.ts$|\\.fixture\\.ts$|/test-helpers\\.ts$|^packages/server/src/test/)';
const ROUTE_FILES = '/(router|routes|[a-z-]+-routes)\\.ts$';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'No import circles in the server, type-only imports included.',
      from: { path: SRC },
      to: { circular: true },
    },
    {
      name: 'core-not-to-domains',
      severity: 'error',
      comment: 'The core (auth, metering, runs, providers, generation, db, storage) never imports a domain.',
      from: { path: CORE, pathNot: TESTS },
      to: { path: DOMAINS },
    },
    {
      name: 'core-not-to-http',
      severity: 'error',
      comment: 'The core never imports the transport.',
      from: { path: CORE, pathNot: TESTS },
      to: { path: HTTP },
    },
    {
      name: 'domain-logic-not-to-http',
      severity: 'error',
      comment: 'Only a domain route file (router.ts, routes.ts, *-routes.ts) may import http/.',
      from: { path: DOMAINS, pathNot: [ROUTE_FILES, TESTS] },
      to: { path: HTTP },
    },
    {
      name: 'http-not-to-domains',
      severity: 'error',
      comment: 'http/ holds transport only: it never imports a domain.',
      from: { path: HTTP, pathNot: TESTS },
      to: { path: DOMAINS },
    },
    {
      name: 'foundation-imports-nothing-above',
      severity: 'error',
      comment: 'Foundation modules (errors/, util/, config, logger, small utils) import only foundation.',
      from: { path: FOUNDATION, pathNot: TESTS },
      to: { path: SRC, pathNot: FOUNDATION },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(node_modules|dist|generated)/' },
    includeOnly: SRC,
    tsPreCompilationDeps: true,
    enhancedResolveOptions: {
      extensions: ['.ts', '.js', '.json'],
    },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
