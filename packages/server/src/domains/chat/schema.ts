import { z } from 'zod';
import { appError } from '../../errors/index.js';

export const ChatRoleSchema = z.enum(['user', 'assistant', 'system']);

export const ChatMessageSchema = z
  .object({
    role: ChatRoleSchema,
    content: z.string().min(1),
  })
  .meta({ id: 'ChatMessage', description: 'One chat message (spec 2.2).' });

/** `POST /chat` body (spec 4.1). Validation with the spec's exact messages is `parseChatRequest`. */
export const ChatRequestSchema = z
  .object({
    messages: z.array(ChatMessageSchema).min(1).describe('At least one message; the last must have content.'),
    model: z
      .string()
      .optional()
      .describe('Model id; defaults to the configured default chat model (see docs/models-and-metering.md).'),
  })
  .meta({ id: 'ChatRequest' });

export type ChatRequestInput = z.infer<typeof ChatRequestSchema>;

const ROLES = new Set(['user', 'assistant', 'system']);

/**
 * Validates a `/chat` body in the order the spec's messages imply: no messages array →
 * `Messages array is required`; last message without non-empty string content →
 * `Last message must have valid content`; anything else malformed (roles outside the three,
 * earlier messages without content, a non-string model) → `Invalid request body`.
 * Hand-written so the messages are exact and the hot path stays cheap.
 */
export function parseChatRequest(body: unknown): ChatRequestInput {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw appError('INVALID_REQUEST_BODY');
  const b = body as { messages?: unknown; model?: unknown };
  if (!Array.isArray(b.messages) || b.messages.length === 0) throw appError('MESSAGES_REQUIRED');
  const messages = b.messages as unknown[];
  const last = messages[messages.length - 1] as { content?: unknown } | null;
  if (
    !last ||
    typeof last !== 'object' ||
    typeof last.content !== 'string' ||
    last.content.trim().length === 0
  ) {
    throw appError('LAST_MESSAGE_INVALID');
  }
  const out: ChatRequestInput['messages'] = [];
  for (const m of messages) {
    const msg = m as { role?: unknown; content?: unknown } | null;
    if (!msg || typeof msg !== 'object' || Array.isArray(msg)) throw appError('INVALID_REQUEST_BODY');
    if (typeof msg.role !== 'string' || !ROLES.has(msg.role)) throw appError('INVALID_REQUEST_BODY');
    if (typeof msg.content !== 'string' || msg.content.length === 0) throw appError('INVALID_REQUEST_BODY');
    out.push({ role: msg.role as ChatRequestInput['messages'][number]['role'], content: msg.content });
  }
  if (b.model !== undefined && b.model !== null && typeof b.model !== 'string') {
    throw appError('INVALID_REQUEST_BODY');
  }
  return { messages: out, model: typeof b.model === 'string' && b.model !== '' ? b.model : undefined };
}
