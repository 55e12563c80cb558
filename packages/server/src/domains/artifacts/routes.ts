import type { Request, Response, Router } from 'express';
import { API_KEY, authenticate } from '../../auth/authenticate.js';
import type { ServerDeps } from '../../context.js';
import { validationError } from '../../errors/index.js';
import { ErrorBodySchema, sendError, toAppError } from '../../http/errors.js';
import { jsonReader, readJsonBody } from '../../http/json-body.js';
import { securityFor } from '../../http/openapi-security.js';
import type { RawRouteModule } from '../../http/raw-routes.js';
import { ArtifactRequestSchema, ArtifactResponseSchema, MAX_BODY_BYTES } from './schema.js';
import { ArtifactsService, invalidInput } from './service.js';

const OVERSIZED = `The request body exceeds ${MAX_BODY_BYTES} bytes`;

/**
 * The reader stops at the limit plus room for the sender's whitespace, so a body of any size
 * is refused unread; the spec's measure (the body serialised as JSON) is applied after parsing.
 */
const readBody = jsonReader(MAX_BODY_BYTES + 1024);

export const artifactRoutes: RawRouteModule = {
  name: 'artifacts',
  mount(router: Router, deps: ServerDeps) {
    router.post('/artifacts/generate', async (req: Request, res: Response) => {
      // A caller that goes away stops the generation (no tokens burnt for nobody).
      const gone = new AbortController();
      res.on('close', () => {
        if (!res.writableFinished) gone.abort();
      });
      try {
        const em = deps.em();
        const principal = await authenticate(req, deps, em, API_KEY);
        // Every refusal of the body is the spec's 400 INVALID_INPUT (413 and content type included).
        const { body: raw, error } = await readJsonBody(readBody, req, res);
        if (error) throw invalidInput(error.status === 413 ? OVERSIZED : error.message);
        // The spec's measure: the body serialised as JSON (whitespace of the sender aside).
        if (Buffer.byteLength(JSON.stringify(raw ?? null)) > MAX_BODY_BYTES) throw invalidInput(OVERSIZED);
        const parsed = ArtifactRequestSchema.safeParse(raw ?? {});
        if (!parsed.success) throw validationError(parsed.error.issues, 'INVALID_INPUT');
        const out = await new ArtifactsService(em, deps, principal, req.requestId ?? '').generate(
          parsed.data,
          gone.signal,
        );
        res.json(out);
      } catch (err) {
        if (gone.signal.aborted) return;
        const e = toAppError(err);
        if (e.status >= 500 && e.status !== 502)
          deps.log.error({ err, requestId: req.requestId }, 'artifact generation failed');
        sendError(res, e);
      }
    });
  },
  openapi: {
    '/artifacts/generate': {
      post: {
        tags: ['Artifacts'],
        summary: 'Generate a structured insight report from aggregated customer data',
        description:
          'One structured-output model call (one repair call when the reply does not validate), credit-metered. The report follows spec 2.13; templates `insight-narrative-v1` (default) and `insight-brief-v1`. docs/artifacts.md.',
        operationId: 'artifacts-generate',
        security: securityFor(API_KEY),
        requestBody: { required: true, content: { 'application/json': { schema: ArtifactRequestSchema } } },
        responses: {
          '200': {
            description: 'The report',
            content: { 'application/json': { schema: ArtifactResponseSchema } },
          },
          '400': {
            description:
              'code `INVALID_INPUT`: a field out of its rules, an unknown `templateId` or `model`, a body over 512,000 bytes',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '401': {
            description: '`Invalid API key`',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '402': {
            description: 'code `INSUFFICIENT_CREDITS`',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '404': {
            description: 'code `APP_NOT_FOUND` (`App not found in this workspace`)',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '500': {
            description: '`Failed to generate report: the model did not return a valid report`',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '502': {
            description: '`AI model error: <details>` or `AI service is temporarily unavailable`',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
          '503': {
            description: '`No AI model configured`',
            content: { 'application/json': { schema: ErrorBodySchema } },
          },
        },
      },
    },
  },
};
