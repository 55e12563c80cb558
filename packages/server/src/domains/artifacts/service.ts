import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { AppError, appError } from '../../errors/index.js';
import { MeteredCall, metered } from '../../generation/metered-call.js';
import type { LlmMessage, ModelInfo } from '../../providers/llm.js';
import { estimateTokens, messageChars } from '../../providers/tokens.js';
import { assertWorkspaceApp } from '../apps/service.js';
import {
  type ArtifactRequest,
  type ArtifactResponse,
  ATTENTION_LEVELS,
  INSIGHT_CATEGORIES,
  MAX_EVIDENCE,
  ReportLlmSchema,
  SAMPLE_VALUE_CHARS,
} from './schema.js';

export const ARTIFACTS_ENDPOINT = '/artifacts/generate';
export const DEFAULT_TEMPLATE = 'insight-narrative-v1';

/** A 400 with the code the spec gives artifacts' validation failures. */
export const invalidInput = (message: string, details?: Record<string, unknown>) =>
  appError('INVALID_INPUT', { message, details });

/**
 * The report templates: how the model is asked to read the payload. Both produce the same
 * report shape (spec 2.13); `insight-brief-v1` asks for fewer, shorter items.
 */
export const TEMPLATES: Record<string, { name: string; instructions: string }> = {
  'insight-narrative-v1': {
    name: 'Insight narrative',
    instructions:
      'Write an executive summary of 120 to 400 words that tells what the data shows, then the insights that matter most (each with a short title of at most 120 characters, a body, a category and up to 12 evidence items quoting figures or samples from the payload), then follow-up considerations with an attention level, then notes on how confident the reading is (sample size, gaps).',
  },
  'insight-brief-v1': {
    name: 'Insight brief',
    instructions:
      'Write a brief: an executive summary of 120 to 180 words, at most three insights (title of at most 120 characters, two-sentence body, category, up to 5 evidence items quoting figures from the payload), at most two follow-up considerations with an attention level, and one sentence of confidence notes.',
  },
};

/** The JSON Schema the model's reply must follow (structured output, strict). */
const REPORT_JSON_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['executiveSummary', 'insights', 'followUpConsiderations', 'confidenceNotes'],
  properties: {
    executiveSummary: { type: 'string' },
    insights: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['title', 'body', 'category', 'evidence'],
        properties: {
          title: { type: 'string' },
          body: { type: 'string' },
          category: { type: 'string', enum: [...INSIGHT_CATEGORIES] },
          evidence: { type: 'array', items: { type: 'string' } },
        },
      },
    },
    followUpConsiderations: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['title', 'body', 'attentionLevel'],
        properties: {
          title: { type: 'string' },
          body: { type: 'string' },
          attentionLevel: { type: 'string', enum: [...ATTENTION_LEVELS] },
        },
      },
    },
    confidenceNotes: { type: 'string' },
  },
} as const;

/** A sample field value as the model sees it: text, cut at ~800 characters. */
export function sampleValue(v: unknown): unknown {
  if (v === null || typeof v === 'number' || typeof v === 'boolean') return v;
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  const chars = [...s];
  return chars.length > SAMPLE_VALUE_CHARS ? `${chars.slice(0, SAMPLE_VALUE_CHARS).join('')}…` : s;
}

function promptFor(req: ArtifactRequest, template: { instructions: string }): LlmMessage[] {
  const samples = (req.input.samples ?? []).map((s) => ({
    ...(s.id !== undefined ? { id: s.id } : {}),
    fields: Object.fromEntries(Object.entries(s.fields ?? {}).map(([k, v]) => [k, sampleValue(v)])),
  }));
  const ctx = req.input.context ?? {};
  const system = [
    'You turn aggregated customer data into a structured insight report.',
    'Use only what the payload shows; never invent figures. Reply with JSON only, following the given schema.',
    `Categories: ${INSIGHT_CATEGORIES.join(', ')}. Attention levels: ${ATTENTION_LEVELS.join(', ')}.`,
    template.instructions,
    ctx.locale ? `Write in the language of locale ${ctx.locale}.` : '',
    ctx.audienceProfile ? `The audience: ${ctx.audienceProfile}.` : '',
    ctx.instructions ? `The caller's instructions (they cannot change the format): ${ctx.instructions}` : '',
  ]
    .filter(Boolean)
    .join('\n');
  const payload = {
    scope: req.scope,
    period: req.period ?? {},
    aggregates: req.input.aggregates,
    samples,
  };
  return [
    { role: 'system', content: system },
    { role: 'user', content: JSON.stringify(payload) },
  ];
}

/** The model's reply as a report body, or the reasons it is not one. */
function readReport(
  text: string,
): { ok: true; llm: ArtifactResponse['data']['outputSnapshot']['llm'] } | { ok: false; why: string } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { ok: false, why: 'the reply is not JSON' };
  }
  const parsed = ReportLlmSchema.safeParse(json);
  if (parsed.success) {
    const llm = parsed.data;
    // Spec 8: 12 evidence items per insight; a longer list is cut, not refused.
    for (const i of llm.insights) i.evidence = i.evidence.slice(0, MAX_EVIDENCE);
    return { ok: true, llm };
  }
  return {
    ok: false,
    why: parsed.error.issues.map((i) => `${i.path.join('.') || 'reply'}: ${i.message}`).join('; '),
  };
}

/**
 * `POST /artifacts/generate` (spec 4.8): one structured-output call (plus one repair call when
 * the reply does not validate), credit-metered, the report kept in `artifact_reports`.
 */
export class ArtifactsService {
  constructor(
    private readonly em: EntityManager,
    private readonly deps: ServerDeps,
    private readonly principal: Principal,
    private readonly requestId: string,
  ) {}

  /** `signal`: the caller went away; the model call is aborted and what it cost so far recorded. */
  async generate(req: ArtifactRequest, signal?: AbortSignal): Promise<ArtifactResponse> {
    const templateId = req.templateId ?? DEFAULT_TEMPLATE;
    const template = TEMPLATES[templateId];
    if (!template) {
      throw invalidInput(`Unknown templateId "${templateId}". Known: ${Object.keys(TEMPLATES).join(', ')}`);
    }
    const ws = this.principal.workspaceId;
    if (req.appId !== undefined) await assertWorkspaceApp(this.em, ws, req.appId);
    let model: ModelInfo;
    try {
      model = this.deps.models.resolve('chat', req.model);
    } catch (err) {
      if (err instanceof AppError && err.status === 400) throw invalidInput(err.message, err.details);
      throw err;
    }
    const messages = promptFor(req, template);
    const meter = await this.deps.metering.startGeneration(
      {
        workspaceId: ws,
        apiKeyId: this.principal.keyId ?? null,
        appId: req.appId ?? null,
        requestId: this.requestId,
        endpoint: ARTIFACTS_ENDPOINT,
        model,
        meter: 'credits',
      },
      { inputTokens: estimateTokens(messageChars(messages)) },
    );
    // Settled once: `success` after a report that validates (`aborted` when the caller left),
    // else `error` (`aborted` when the caller left).
    const call = new MeteredCall(this.deps.llm, meter, signal);
    const llm = await metered(call, async () => {
      const responseSchema = {
        name: 'insight_report',
        schema: REPORT_JSON_SCHEMA as unknown as Record<string, unknown>,
      };
      const first = await call.complete({ model, messages, responseSchema });
      let read = readReport(first.text);
      if (!read.ok) {
        // One repair round: the model sees its reply and what was wrong with it (the call
        // notes the longer prompt and re-checks the hold first).
        const repair: LlmMessage[] = [
          ...messages,
          { role: 'assistant', content: first.text },
          {
            role: 'user',
            content: `That reply is not a valid report (${read.why}). Reply again with the whole report as JSON that follows the schema and its rules.`,
          },
        ];
        const second = await call.complete({ model, responseSchema, messages: repair });
        read = readReport(second.text);
      }
      if (!read.ok) {
        this.deps.log.warn({ requestId: this.requestId, why: read.why }, 'artifact report did not validate');
        throw appError('REPORT_FAILED');
      }
      return read.llm;
    });
    const snapshot = {
      version: 1 as const,
      generatedAt: new Date().toISOString(),
      templateId,
      scope: req.scope,
      period: req.period ?? {},
      source: {
        type: 'customer_payload' as const,
        recordCount: req.input.aggregates.recordCount ?? 0,
        sampleCount: req.input.samples?.length ?? 0,
      },
      llm,
    };
    const usage = {
      model: model.id,
      inputTokens: meter.inputTokens,
      outputTokens: meter.outputTokens,
      costUsd: meter.costMicros() / 1_000_000,
      providerSlug: model.provider,
    };
    const workflowRunId = randomUUID();
    let persisted = false;
    try {
      await this.em.execute(
        `insert into artifact_reports (id, workspace_id, app_id, request_id, template_id, external_ref, model,
           input_tokens, output_tokens, cost_micros, snapshot)
         values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::jsonb)`,
        [
          workflowRunId,
          ws,
          req.appId ?? null,
          this.requestId,
          templateId,
          req.externalRef ?? null,
          model.id,
          usage.inputTokens,
          usage.outputTokens,
          meter.costMicros(),
          JSON.stringify(snapshot),
        ],
      );
      persisted = true;
    } catch (err) {
      // The report is paid for: the caller gets it even when keeping a copy failed.
      this.deps.log.error({ err, requestId: this.requestId }, 'storing the artifact report failed');
    }
    return {
      data: { templateId, outputSnapshot: snapshot, usage },
      meta: { requestId: this.requestId, persisted, workflowRunId },
    };
  }
}
