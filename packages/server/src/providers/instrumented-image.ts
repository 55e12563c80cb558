import { genAiObserved, startGenAiCall } from '../telemetry/genai.js';
import type { ImageProvider } from './image.js';

/**
 * An image provider whose generations are observed as GenAI calls (operation `image`: span
 * `image <model>`, `gen_ai_client_operation_duration_seconds`, and `gen_ai_client_token_usage`
 * when the provider reports tokens). The provider itself when telemetry is off.
 */
export function observeImageProvider(provider: ImageProvider, providerName: string): ImageProvider {
  if (!genAiObserved()) return provider;
  return {
    async generate(req) {
      const call = startGenAiCall({ operation: 'image', model: req.model.upstream, provider: providerName });
      try {
        const r = await call.run(() => provider.generate(req));
        const reported = r.inputTokens + r.outputTokens > 0;
        call.end({
          inputTokens: reported ? r.inputTokens : undefined,
          outputTokens: reported ? r.outputTokens : undefined,
          reported,
        });
        return r;
      } catch (err) {
        call.fail(err);
        throw err;
      }
    },
  };
}
