import type { EntityManager } from '@mikro-orm/postgresql';
import type { Principal } from '../../auth/principal.js';
import type { ServerDeps } from '../../context.js';
import { appError } from '../../errors/index.js';
import {
  ImageAbortedError,
  type ImageProvider,
  ImageProviderError,
  ImageQuotaError,
  OpenAIImageProvider,
  ReplicateImageProvider,
} from '../../providers/image.js';
import { observeImageProvider } from '../../providers/instrumented-image.js';
import type { ModelInfo } from '../../providers/llm.js';
import { estimateTokens } from '../../providers/tokens.js';
import { isUuid, StorageService } from '../storage/service.js';
import { enhanceUltrasound, toPng } from './enhance.js';
import type { ImageRequest, ImageResponse } from './schema.js';
import type { ImageSettings } from './settings.js';
import { checkImage, decodeBase64Image, fetchImageUrl, type ImageMime } from './source.js';

export const IMAGE_ENDPOINT = '/image';

/** What the `ultrasound` profile supplies when the caller does not. */
export const ULTRASOUND_PROFILE = {
  prompt:
    'Enhance this ultrasound image: reduce speckle noise, improve local contrast and keep every anatomical structure and measurement unchanged.',
  operation: 'edit' as const,
};

type ProviderType = 'replicate' | 'openai';

/** One client per configured provider, made on first use. */
export class ImageProviders {
  private readonly cache = new Map<string, ImageProvider>();
  constructor(
    private readonly deps: Pick<ServerDeps, 'models'>,
    private readonly settings: ImageSettings,
  ) {}

  typeOf(model: ModelInfo): ProviderType {
    const t = this.deps.models.provider(model.provider)?.type;
    if (t === 'replicate' || t === 'openai') return t;
    throw appError('MODEL_CONFIGURATION_ERROR');
  }

  get(model: ModelInfo): ImageProvider {
    let p = this.cache.get(model.provider);
    if (!p) {
      const cfg = this.deps.models.provider(model.provider) ?? {};
      const s = {
        preferWaitSeconds: this.settings.preferWaitSeconds,
        timeoutMs: this.settings.timeoutMs,
        pollInitialMs: this.settings.pollInitialMs,
        pollMaxMs: this.settings.pollMaxMs,
        maxOutputBytes: this.settings.maxBytes * 4,
      };
      const type = this.typeOf(model);
      p = observeImageProvider(
        type === 'replicate' ? new ReplicateImageProvider(cfg, s) : new OpenAIImageProvider(cfg, s),
        type === 'replicate' ? 'replicate' : 'openai',
      );
      this.cache.set(model.provider, p);
    }
    return p;
  }
}

export class ImageService {
  constructor(
    private readonly em: EntityManager,
    private readonly deps: ServerDeps,
    private readonly providers: ImageProviders,
    private readonly settings: ImageSettings,
    private readonly principal: Principal,
    private readonly requestId: string,
  ) {}

  /** Which model serves the request: the caller's, the profile's, or the provider's default. */
  resolveModel(req: ImageRequest): { model: ModelInfo; provider: ProviderType } {
    const models = this.deps.models;
    const wanted = req.provider;
    let model: ModelInfo | undefined;
    if (req.model) {
      model = models.resolve('image', req.model);
    } else {
      const profileModel = req.profile === 'ultrasound' ? this.settings.ultrasoundModel : undefined;
      if (profileModel) {
        const m = models.list('image').find((x) => x.id === profileModel);
        if (!m) throw appError('MODEL_CONFIGURATION_ERROR');
        if (!wanted || this.providers.typeOf(m) === wanted) model = m;
      }
      if (!model) {
        const type = wanted ?? 'replicate';
        const candidates = models.list('image').filter((m) => this.providers.typeOf(m) === type);
        const def = models.defaultId('image');
        model = candidates.find((m) => m.id === def) ?? candidates[0];
        if (!model) throw appError('NO_AI_MODEL_CONFIGURED');
      }
    }
    const provider = this.providers.typeOf(model);
    if (wanted && provider !== wanted) {
      throw appError('INVALID_MODEL', {
        details: {
          model: model.id,
          provider: wanted,
          validModels: models
            .list('image')
            .filter((m) => this.providers.typeOf(m) === wanted)
            .map((m) => m.id),
        },
      });
    }
    if (provider === 'openai' && req.profile !== 'ultrasound') {
      throw appError('PROVIDER_NOT_ALLOWED', {
        details: {
          provider,
          profile: req.profile ?? null,
        },
      });
    }
    return { model, provider };
  }

  async run(req: ImageRequest, signal: AbortSignal): Promise<ImageResponse> {
    const ws = this.principal.workspaceId;
    const profile = req.profile;
    const prompt = req.prompt?.trim() || (profile === 'ultrasound' ? ULTRASOUND_PROFILE.prompt : '');
    if (!prompt) throw appError('PROMPT_REQUIRED');

    const given = (['image', 'image_url', 'raw_image_id'] as const).filter((k) => req[k] !== undefined);
    if (given.length > 1) throw appError('MULTIPLE_IMAGE_INPUTS', { details: { given } });
    const operation =
      req.operation ??
      (given.length > 0 || profile === 'ultrasound' ? ULTRASOUND_PROFILE.operation : 'generate');
    if (operation === 'edit' && given.length === 0) {
      throw appError('MISSING_IMAGE_INPUT');
    }
    if (operation === 'generate' && given.length > 0) {
      throw appError('INVALID_OPERATION', { given: String(given[0]) });
    }
    const { model, provider } = this.resolveModel(req);
    const store =
      req.store ??
      (this.settings.storeDefault === 'auto'
        ? this.deps.objects.kind === 's3'
        : this.settings.storeDefault === 'true');

    // The source is read and checked before any credit is taken: bad input costs nothing.
    const limits = { maxBytes: this.settings.maxBytes, maxPixels: this.settings.maxPixels };
    const storage = new StorageService(this.em, this.deps.objects);
    let source: { bytes: Buffer; mimeType: ImageMime } | undefined;
    let rawFile: { id: string; presignedUrl: string | null } | undefined;
    if (req.image !== undefined) {
      source = await checkImage(decodeBase64Image(req.image, limits.maxBytes), limits);
    } else if (req.image_url !== undefined) {
      source = await fetchImageUrl(
        req.image_url,
        {
          ...limits,
          timeoutMs: this.settings.urlTimeoutMs,
          maxRedirects: this.settings.urlMaxRedirects,
          policy: this.settings.policy,
        },
        signal,
      );
    } else if (req.raw_image_id !== undefined) {
      if (!isUuid(req.raw_image_id)) throw appError('FILE_NOT_FOUND');
      const file = await storage.getFile(ws, req.raw_image_id);
      if (file.type !== 'image') throw appError('FILE_NOT_FOUND');
      if ((file.sizeBytes ?? 0) > limits.maxBytes) {
        throw appError('IMAGE_TOO_LARGE', { maxBytes: limits.maxBytes });
      }
      source = await checkImage(await storage.readContent(ws, file.id), limits);
      rawFile = file;
    }

    const priceMicros = Math.round((model.pricePerImage ?? 0) * 1_000_000);
    const meter = await this.deps.metering.startGeneration(
      {
        workspaceId: ws,
        apiKeyId: this.principal.keyId ?? null,
        requestId: this.requestId,
        endpoint: IMAGE_ENDPOINT,
        model,
        meter: 'credits',
      },
      // The prompt's tokens are held (gpt-image bills them), not charged if the call fails.
      { minimumMicros: priceMicros, expectedInputTokens: estimateTokens(prompt.length) },
    );
    let status: 'success' | 'error' | 'aborted' = 'error';
    try {
      let out: Awaited<ReturnType<ImageProvider['generate']>>;
      try {
        out = await this.providers.get(model).generate({ model, prompt, source, signal });
      } catch (err) {
        if (err instanceof ImageAbortedError || signal.aborted) status = 'aborted';
        throw err;
      }
      const processLimits = {
        concurrency: this.settings.processConcurrency,
        timeoutSeconds: this.settings.processTimeoutSeconds,
      };
      let processed: Buffer;
      try {
        await checkImage(out.bytes, { maxBytes: out.bytes.length, maxPixels: this.settings.maxPixels });
        processed =
          profile === 'ultrasound'
            ? await enhanceUltrasound(out.bytes, { maxPixels: this.settings.maxPixels, ...processLimits })
            : await toPng(out.bytes, this.settings.maxPixels, processLimits);
      } catch {
        throw new ImageProviderError('the provider returned an image that could not be read');
      }
      if (signal.aborted) {
        status = 'aborted';
        throw new ImageAbortedError('The caller went away');
      }
      const tokensUsed = out.inputTokens + out.outputTokens;
      const base = {
        model: model.id,
        prompt,
        operation,
        tokensUsed,
        ...(profile ? { profile } : {}),
        provider,
      };
      let stored: Partial<ImageResponse> = {};
      if (store) {
        const label = `Image ${operation}${profile ? ` (${profile})` : ''}`;
        if (!rawFile) {
          const rawBytes = source?.bytes ?? out.bytes;
          const rawMime =
            source?.mimeType ??
            (await checkImage(out.bytes, { maxBytes: Infinity, maxPixels: Infinity })).mimeType;
          rawFile = await storage.createFile({
            workspaceId: ws,
            type: 'image',
            filename: `image-${this.requestId}-raw.${rawMime.split('/')[1]}`,
            mimeType: rawMime,
            source: `${label}: raw`,
            sourceId: this.requestId,
            body: rawBytes,
            contentLength: rawBytes.length,
          });
        }
        const processedFile = await storage.createFile({
          workspaceId: ws,
          type: 'image',
          filename: `image-${this.requestId}.png`,
          mimeType: 'image/png',
          source: `${label}: processed`,
          sourceId: this.requestId,
          body: processed,
          contentLength: processed.length,
        });
        stored = {
          raw_image_id: rawFile.id,
          processed_run_id: processedFile.id,
          raw_url: rawFile.presignedUrl ?? undefined,
          processed_url: processedFile.presignedUrl ?? undefined,
          request_id: this.requestId,
        };
      }
      meter.addImages(1);
      meter.addUsage({ inputTokens: out.inputTokens, outputTokens: out.outputTokens, estimated: false });
      status = 'success';
      const { costMicros } = await meter.finish('success');
      return store
        ? { ...base, ...stored, costMicros }
        : { ...base, image: processed.toString('base64'), costMicros };
    } catch (err) {
      await meter.finish(status).catch(() => undefined);
      if (err instanceof ImageQuotaError)
        throw appError('PROVIDER_QUOTA_EXCEEDED', { providerMessage: err.message });
      if (err instanceof ImageProviderError) {
        throw appError('IMAGE_GENERATION_FAILED', { message: err.message });
      }
      throw err;
    }
  }
}
