import type { Principal } from '../../auth/principal.js';
import type { LlmMessage, LlmUsage } from '../../providers/llm.js';
import type { ChatMessageInput } from './schema.js';
import type { AppRow } from './service.js';

export const DEFAULT_SYSTEM_PROMPT = 'You are a helpful assistant.';
export const DEFAULT_MAX_CONTEXT_MESSAGES = 20;
const CONTEXT_JSON_LIMIT = 4000;
export const HISTORY_ITEM_LIMIT = 8000;

const truncate = (s: string, n: number) => (s.length > n ? `${s.slice(0, n)}…` : s);

function contextBlock(label: string, value: Record<string, unknown> | undefined): string | undefined {
  if (!value || Object.keys(value).length === 0) return undefined;
  return `${label}:\n${truncate(JSON.stringify(value), CONTEXT_JSON_LIMIT)}`;
}

/** The prompt: app prompt and contexts, seeded history, the thread's recent messages, the message. */
export function buildPrompt(
  app: AppRow,
  input: ChatMessageInput,
  threadHistory: { role: string; content: string }[],
): LlmMessage[] {
  const system = [
    app.system_prompt?.trim() || DEFAULT_SYSTEM_PROMPT,
    `The person writing has the role: ${input.role}.`,
    contextBlock('Lesson context', input.lessonContext),
    contextBlock('Session context', input.sessionContext),
    contextBlock('Page context', input.pageContext),
  ]
    .filter(Boolean)
    .join('\n\n');
  const out: LlmMessage[] = [{ role: 'system', content: system }];
  // Callers cannot inject system instructions through history: anything not `assistant` is `user`.
  const asTurn = (m: { role: string; content: string }): LlmMessage =>
    m.role === 'assistant'
      ? { role: 'assistant', content: truncate(m.content, HISTORY_ITEM_LIMIT) }
      : { role: 'user', content: truncate(m.content, HISTORY_ITEM_LIMIT) };
  for (const m of input.chatHistory ?? []) out.push(asTurn(m));
  for (const m of threadHistory) out.push(asTurn(m));
  out.push({ role: 'user', content: input.message });
  return out;
}

/** Characters of a prompt, as `estimateUsage` counts them. */
export const promptChars = (messages: LlmMessage[]) =>
  messages.reduce((n, m) => n + (m.content?.length ?? 0), 0);

/** `external_user_id` / `anonymous_visitor_id` for insights' `user_key`; a subject-bound token wins. */
export function identityMetadata(input: ChatMessageInput, principal: Principal): Record<string, string> {
  const out: Record<string, string> = {};
  const ext = input.externalIdentity;
  if (ext?.externalUserId) out.external_user_id = ext.externalUserId;
  if (ext?.anonymousVisitorId) out.anonymous_visitor_id = ext.anonymousVisitorId;
  if (ext?.role) out.external_user_role = ext.role;
  if (principal.widgetSubject) out.external_user_id = principal.widgetSubject;
  return out;
}

/** About 4 characters per token (spec 8), when the upstream reports no usage. */
export function estimateUsage(messages: LlmMessage[], reply: string): LlmUsage {
  const promptChars = messages.reduce((n, m) => n + (m.content?.length ?? 0), 0);
  return {
    inputTokens: Math.ceil(promptChars / 4),
    outputTokens: Math.ceil(reply.length / 4),
    estimated: true,
  };
}
