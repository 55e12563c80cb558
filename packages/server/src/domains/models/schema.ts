import { z } from 'zod';

export const MODEL_KINDS = ['chat', 'embedding', 'image'] as const;

export const ModelSchema = z
  .object({
    id: z.string().describe('The value to pass as `model` (or `llm.componentId`)'),
    kind: z.enum(MODEL_KINDS),
    contextWindow: z.number().describe('Tokens'),
    inputPricePerMTok: z.number().describe('USD per million input tokens'),
    outputPricePerMTok: z.number().describe('USD per million output tokens'),
    pricePerImage: z.number().nullable().describe('USD per generated image (image models)'),
    default: z.boolean().describe('Used when a request names no model of this kind'),
  })
  .meta({ id: 'Model' });

export const ListModelsInput = z.object({
  kind: z
    .enum(MODEL_KINDS, { error: 'kind must be one of: chat, embedding, image' })
    .optional()
    .describe('Only models of this kind'),
});

export const ModelListSchema = z.object({ models: z.array(ModelSchema) }).meta({ id: 'ModelList' });
