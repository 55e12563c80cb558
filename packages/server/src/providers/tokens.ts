import type { LlmMessage } from './llm.js';

/** About four characters per token (spec 8), used when the upstream reports no usage. */
export const estimateTokens = (chars: number): number => (chars <= 0 ? 0 : Math.ceil(chars / 4));

export function messageChars(messages: LlmMessage[]): number {
  let n = 0;
  for (const m of messages) {
    if (typeof m.content === 'string') n += m.content.length;
    if (m.role === 'assistant' && m.toolCalls) {
      for (const t of m.toolCalls) n += t.name.length + t.arguments.length;
    }
  }
  return n;
}
