import type { ModelInfo } from '../providers/llm.js';
import type { MeteringSettings } from './settings.js';
import type { UsageComponentLine } from './types.js';

/** Price of one line: quantity × unit price in micro-dollars, rounded up to a whole micro. */
export const lineCost = (quantity: number, unitPriceMicros: number) =>
  Math.ceil(quantity * unitPriceMicros - 1e-9);

/** Price of one chunk of output (`creditCheckEveryTokens` tokens), at least 1 µ$. */
export function chunkMicros(
  settings: Pick<MeteringSettings, 'creditCheckEveryTokens'>,
  model: ModelInfo,
): number {
  return Math.max(1, lineCost(settings.creditCheckEveryTokens, model.outputPricePerMTok));
}

/** Price of a model call in micro-dollars, with its component lines (`Metering.price`). */
export function price(
  model: ModelInfo,
  inputTokens: number,
  outputTokens: number,
  images = 0,
): { costMicros: number; lines: UsageComponentLine[] } {
  // USD per million tokens = micro-dollars per token.
  const lines: UsageComponentLine[] = [];
  if (inputTokens > 0 || images === 0) {
    lines.push({
      component: 'input_tokens',
      quantity: inputTokens,
      unitPriceMicros: model.inputPricePerMTok,
      costMicros: lineCost(inputTokens, model.inputPricePerMTok),
    });
  }
  if (outputTokens > 0 || images === 0) {
    lines.push({
      component: 'output_tokens',
      quantity: outputTokens,
      unitPriceMicros: model.outputPricePerMTok,
      costMicros: lineCost(outputTokens, model.outputPricePerMTok),
    });
  }
  if (images > 0) {
    const unit = Math.round((model.pricePerImage ?? 0) * 1_000_000);
    lines.push({ component: 'image', quantity: images, unitPriceMicros: unit, costMicros: images * unit });
  }
  return { costMicros: lines.reduce((s, l) => s + l.costMicros, 0), lines };
}
