import { z } from 'zod';

export const IMAGE_PROFILES = ['ultrasound'] as const;
export const IMAGE_PROVIDERS = ['replicate', 'openai'] as const;

/** Spec 4.9's request. Unknown keys are refused (a misspelt `image_url` must not be ignored). */
export const ImageRequestSchema = z
  .strictObject({
    prompt: z
      .string({ error: 'prompt must be a string' })
      .max(4000, 'prompt must be 4000 characters or less')
      .optional(),
    operation: z.enum(['generate', 'edit'], { error: 'operation must be one of: generate, edit' }).optional(),
    model: z.string({ error: 'model must be a string' }).max(200).optional(),
    profile: z.enum(IMAGE_PROFILES, { error: 'Unknown profile. Must be one of: ultrasound' }).optional(),
    image: z
      .string({ error: 'image must be a base64 string' })
      .optional()
      .meta({ description: 'Base64 source image, with or without a `data:image/…;base64,` prefix' }),
    image_url: z
      .string({ error: 'image_url must be a string' })
      .max(2048, 'image_url must be 2048 characters or less')
      .optional()
      .meta({
        description: 'http(s) URL of a PNG, JPEG, WebP or GIF source image, fetched through the SSRF guard',
      }),
    raw_image_id: z
      .string({ error: 'raw_image_id must be a string' })
      .optional()
      .meta({ description: 'Id of a stored raw image (storage file of type `image`) of this workspace' }),
    provider: z
      .enum(IMAGE_PROVIDERS, { error: 'provider must be one of: replicate, openai' })
      .optional()
      .meta({
        description:
          '`replicate` (default) or `openai` (an OpenAI-compatible images API; only with profile `ultrasound`)',
      }),
    store: z.boolean({ error: 'store must be a boolean' }).optional().meta({
      description:
        'Store the raw and processed images as storage files of type `image`. Default: true when the server stores objects in S3 (`IMAGE_STORE_DEFAULT=auto`), else false.',
    }),
  })
  .meta({ id: 'ImageRequest' });

export type ImageRequest = z.infer<typeof ImageRequestSchema>;

export const ImageResponseSchema = z
  .object({
    model: z.string(),
    prompt: z.string().meta({ description: 'The resolved prompt sent to the model' }),
    operation: z.enum(['generate', 'edit']),
    tokensUsed: z.number().int(),
    profile: z.enum(IMAGE_PROFILES).optional(),
    provider: z.enum(IMAGE_PROVIDERS),
    image: z
      .string()
      .optional()
      .meta({ description: 'Base64 PNG (without a data: prefix), when nothing was stored' }),
    raw_image_id: z.string().optional().meta({ description: 'Storage file id of the raw image' }),
    processed_run_id: z.string().optional().meta({ description: 'Storage file id of the processed PNG' }),
    raw_url: z.string().optional().meta({ description: 'Signed URL of the raw image, valid 15 minutes' }),
    processed_url: z
      .string()
      .optional()
      .meta({ description: 'Signed URL of the processed PNG, valid 15 minutes' }),
    request_id: z.string().optional(),
    costMicros: z.number().int().meta({ description: 'Credits charged, in micro-dollars' }),
  })
  .meta({ id: 'ImageResponse' });

export type ImageResponse = z.infer<typeof ImageResponseSchema>;

export const ImageInfoSchema = z
  .object({
    message: z.string(),
    endpoint: z.string(),
    methods: z.array(z.string()),
    profiles: z.array(z.string()),
  })
  .meta({ id: 'ImageInfo' });
