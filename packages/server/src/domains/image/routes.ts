import type { Request, Response, Router } from 'express';
import { API_KEY, authenticate } from '../../auth/authenticate.js';
import type { ServerDeps } from '../../context.js';
import { appError, validationError } from '../../errors/index.js';
import { ErrorBodySchema, sendError, toAppError } from '../../http/errors.js';
import { jsonReader, readJsonBody } from '../../http/json-body.js';
import { securityFor } from '../../http/openapi-security.js';
import type { RawRouteModule } from '../../http/raw-routes.js';
import { ImageInfoSchema, ImageRequestSchema, ImageResponseSchema } from './schema.js';
import { ImageProviders, ImageService } from './service.js';
import { imageSettingsFromEnv } from './settings.js';

const err = (description: string) => ({
  description,
  content: { 'application/json': { schema: ErrorBodySchema } },
});

export const IMAGE_METHODS = ['GET', 'POST', 'OPTIONS'];

/**
 * `POST /image` is a raw route (not tRPC): its body may carry a base64 image of several
 * megabytes, and a caller that goes away must cancel the prediction upstream.
 */
export const imageRoutes: RawRouteModule = {
  name: 'image',
  mount(router: Router, deps: ServerDeps) {
    // Read at start: a bad setting stops the server with its name.
    const settings = imageSettingsFromEnv(deps.config.env);
    const providers = new ImageProviders(deps, settings);
    // The body may hold the base64 image (4 characters per 3 bytes) plus the other fields.
    const readBody = jsonReader(Math.ceil((settings.maxBytes * 4) / 3) + 64 * 1024);

    router.options('/image', (_req, res) => {
      res.setHeader('Allow', IMAGE_METHODS.join(', '));
      res.status(204).end();
    });

    router.get('/image', async (req: Request, res: Response) => {
      try {
        await authenticate(req, deps, deps.em(), API_KEY);
        res.json({
          message: 'Image API is available',
          endpoint: '/api/v1/image',
          methods: IMAGE_METHODS,
          profiles: ['ultrasound'],
        });
      } catch (e) {
        sendError(res, toAppError(e));
      }
    });

    router.post('/image', async (req: Request, res: Response) => {
      const gone = new AbortController();
      res.on('close', () => {
        if (!res.writableFinished) gone.abort();
      });
      try {
        const em = deps.em();
        const principal = await authenticate(req, deps, em, API_KEY);
        const { body, error } = await readJsonBody(readBody, req, res);
        if (error) {
          if (error.status === 413) {
            throw appError('IMAGE_TOO_LARGE', {
              maxBytes: settings.maxBytes,
              details: {
                maxBytes: settings.maxBytes,
              },
            });
          }
          throw error;
        }
        const parsed = ImageRequestSchema.safeParse(body ?? {});
        if (!parsed.success) throw validationError(parsed.error.issues);
        const out = await new ImageService(em, deps, providers, settings, principal, req.requestId ?? '').run(
          parsed.data,
          gone.signal,
        );
        res.json(out);
      } catch (e) {
        if (gone.signal.aborted) return;
        const appErr = toAppError(e);
        if (appErr.status >= 500)
          deps.log.error({ err: e, requestId: req.requestId }, 'image request failed');
        sendError(res, appErr);
      }
    });
  },
  openapi: {
    '/image': {
      get: {
        tags: ['Image'],
        summary: 'Connectivity check of the image API',
        operationId: 'image-info',
        security: securityFor(API_KEY),
        responses: {
          '200': {
            description: 'The endpoint answers',
            content: { 'application/json': { schema: ImageInfoSchema } },
          },
          '401': err('`Invalid API key`'),
        },
      },
      post: {
        tags: ['Image'],
        summary:
          'Generate an image from a prompt, or edit a source image, optionally with the ultrasound profile',
        description:
          'Credit-metered per image (plus tokens where the provider reports them). Exactly one source for `edit`: `image` (base64), `image_url` or `raw_image_id`. Stored results (`store`) become storage files of type `image`. docs/image.md.',
        operationId: 'image-create',
        security: securityFor(API_KEY),
        requestBody: { required: true, content: { 'application/json': { schema: ImageRequestSchema } } },
        responses: {
          '200': {
            description: 'The image',
            content: { 'application/json': { schema: ImageResponseSchema } },
          },
          '400': err(
            '`Prompt is required`; code `MISSING_IMAGE_INPUT`; `Invalid model` (`INVALID_MODEL`); `PROVIDER_NOT_ALLOWED`; `MULTIPLE_IMAGE_INPUTS`; `UNSUPPORTED_IMAGE_TYPE`; `INVALID_IMAGE`; `IMAGE_TOO_LARGE` (dimensions); `URL_NOT_ALLOWED`; `IMAGE_FETCH_FAILED`; `VALIDATION_ERROR`',
          ),
          '401': err('`Invalid API key`'),
          '402': err('code `INSUFFICIENT_CREDITS`'),
          '404': err('`File not found` (`raw_image_id` of no image of this workspace)'),
          '413': err('code `IMAGE_TOO_LARGE`: the image (or the body) exceeds `IMAGE_MAX_BYTES`'),
          '429': err("The provider's quota message (code `PROVIDER_QUOTA_EXCEEDED`)"),
          '500': err('`Failed to generate image: <details>` (code `IMAGE_GENERATION_FAILED`)'),
          '503': err('`No AI model configured`; `Model configuration error`'),
        },
      },
    },
  },
};
