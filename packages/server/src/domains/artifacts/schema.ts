import { z } from 'zod';

/** The whole request body, serialised as JSON, may not exceed this (spec 4.8). */
export const MAX_BODY_BYTES = 512_000;
export const MAX_BREAKDOWNS = 20;
export const MAX_BREAKDOWN_ROWS = 100;
export const MAX_SAMPLES = 60;
export const MAX_SAMPLE_KEYS = 20;
/** Sample field values are cut here before they reach the model. */
export const SAMPLE_VALUE_CHARS = 800;
export const MAX_EVIDENCE = 12;

export const SCOPE_LEVELS = ['organization', 'network', 'item'] as const;
export const INSIGHT_CATEGORIES = [
  'key_development',
  'implementation_pressure',
  'alignment_opportunity',
] as const;
export const ATTENTION_LEVELS = ['elevated', 'moderate', 'for_awareness'] as const;

const text = (field: string, max: number) =>
  z
    .string({ error: `${field} must be a string` })
    .max(max, `${field} must be ${max} characters or less`)
    .optional();

const scalar = (message: string) =>
  z.union([z.string(), z.number(), z.boolean(), z.null()], { error: message });

export const ArtifactRequestSchema = z
  .object({
    scope: z.object(
      {
        level: z.enum(SCOPE_LEVELS, { error: 'scope.level must be one of: organization, network, item' }),
        entityId: text('scope.entityId', 256),
        label: text('scope.label', 500),
      },
      { error: 'scope is required' },
    ),
    input: z.object(
      {
        aggregates: z.object(
          {
            recordCount: z
              .number({ error: 'input.aggregates.recordCount must be a number' })
              .int('input.aggregates.recordCount must be an integer')
              .min(0, 'input.aggregates.recordCount must not be negative')
              .optional(),
            metrics: z
              .record(
                z.string(),
                scalar('input.aggregates.metrics values must be a string, number, boolean or null'),
                {
                  error: 'input.aggregates.metrics must be an object',
                },
              )
              .optional(),
            breakdowns: z
              .array(
                z.object(
                  {
                    dimension: z.string({ error: 'each breakdown needs a dimension string' }),
                    rows: z
                      .array(
                        z.object(
                          {
                            key: z.string({ error: 'each breakdown row needs a key string' }),
                            count: z.number({ error: 'breakdown row count must be a number' }).optional(),
                            value: scalar(
                              'breakdown row value must be a string, number, boolean or null',
                            ).optional(),
                          },
                          { error: 'each breakdown row must be an object' },
                        ),
                        { error: 'each breakdown needs a rows array' },
                      )
                      .max(MAX_BREAKDOWN_ROWS, `a breakdown has at most ${MAX_BREAKDOWN_ROWS} rows`),
                  },
                  { error: 'each breakdown must be an object' },
                ),
                { error: 'input.aggregates.breakdowns must be an array' },
              )
              .max(MAX_BREAKDOWNS, `input.aggregates.breakdowns has at most ${MAX_BREAKDOWNS} items`)
              .optional(),
          },
          { error: 'input.aggregates is required' },
        ),
        samples: z
          .array(
            z.object(
              {
                id: z.string({ error: 'sample id must be a string' }).optional(),
                fields: z
                  .record(z.string(), z.unknown(), { error: 'sample fields must be an object' })
                  .refine(
                    (f) => Object.keys(f).length <= MAX_SAMPLE_KEYS,
                    `a sample has at most ${MAX_SAMPLE_KEYS} fields`,
                  )
                  .optional(),
              },
              { error: 'each sample must be an object' },
            ),
            { error: 'input.samples must be an array' },
          )
          .max(MAX_SAMPLES, `input.samples has at most ${MAX_SAMPLES} items`)
          .optional(),
        context: z
          .object(
            {
              instructions: text('input.context.instructions', 4000),
              locale: text('input.context.locale', 32),
              audienceProfile: text('input.context.audienceProfile', 64),
            },
            { error: 'input.context must be an object' },
          )
          .optional(),
      },
      { error: 'input is required' },
    ),
    templateId: z.string({ error: 'templateId must be a string' }).optional(),
    appId: z.string({ error: 'appId must be a string' }).optional(),
    period: z
      .object(
        { start: text('period.start', 32), end: text('period.end', 32) },
        { error: 'period must be an object' },
      )
      .optional(),
    externalRef: text('externalRef', 256),
    model: text('model', 200),
  })
  .meta({ id: 'ArtifactGenerateRequest' });
export type ArtifactRequest = z.infer<typeof ArtifactRequestSchema>;

/** What the model writes (the `llm` part of the report), as it must come back. */
export const ReportLlmSchema = z
  .object({
    executiveSummary: z.string().refine((s) => {
      const n = wordCount(s);
      return n >= 120 && n <= 400;
    }, 'executiveSummary must be 120 to 400 words'),
    insights: z.array(
      z.object({
        title: z
          .string()
          .min(1, 'insight title must not be empty')
          .max(120, 'insight title is at most 120 characters'),
        body: z.string(),
        category: z.enum(INSIGHT_CATEGORIES),
        evidence: z
          .array(z.string())
          .describe(`At most ${MAX_EVIDENCE} items: the service cuts longer lists`),
      }),
    ),
    followUpConsiderations: z.array(
      z.object({ title: z.string(), body: z.string(), attentionLevel: z.enum(ATTENTION_LEVELS) }),
    ),
    confidenceNotes: z.string(),
  })
  .meta({ id: 'InsightReportLlm' });

export function wordCount(s: string): number {
  return s.trim().split(/\s+/).filter(Boolean).length;
}

export const InsightReportSchema = z
  .object({
    version: z.literal(1),
    generatedAt: z.string(),
    templateId: z.string(),
    scope: z.record(z.string(), z.unknown()),
    period: z.record(z.string(), z.unknown()),
    source: z.object({
      type: z.literal('customer_payload'),
      recordCount: z.number(),
      sampleCount: z.number(),
    }),
    llm: ReportLlmSchema,
    displayLabels: z.record(z.string(), z.unknown()).optional(),
  })
  .meta({ id: 'InsightReport' });

export const ArtifactResponseSchema = z
  .object({
    data: z.object({
      templateId: z.string(),
      outputSnapshot: InsightReportSchema,
      usage: z.object({
        model: z.string(),
        inputTokens: z.number(),
        outputTokens: z.number(),
        costUsd: z.number(),
        providerSlug: z.string(),
      }),
    }),
    meta: z.object({ requestId: z.string(), persisted: z.boolean(), workflowRunId: z.string() }),
  })
  .meta({ id: 'ArtifactGenerateResponse' });
export type ArtifactResponse = z.infer<typeof ArtifactResponseSchema>;
