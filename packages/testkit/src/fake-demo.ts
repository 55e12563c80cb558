import type { FakeChatReply } from './fake-openai.js';

/**
 * The fake model's demo mode, for trying the service and the examples without a provider
 * (`pnpm fake-model`). Deterministic and schema-driven, no intelligence: a user turn that
 * offers tools calls each of them once with arguments made from its JSON Schema; after tool
 * results it answers with a summary of them; a structured-output request gets an instance of
 * the requested schema; anything else is echoed back.
 */
export function demoReply(body: any): FakeChatReply {
  const messages: { role: string; content?: unknown }[] = Array.isArray(body?.messages) ? body.messages : [];
  const last = messages.at(-1);
  const schema = body?.response_format?.json_schema?.schema;
  if (schema) return { text: JSON.stringify(exampleOf(schema, '')) };
  const tools: { function: { name: string; parameters?: unknown } }[] = Array.isArray(body?.tools)
    ? body.tools
    : [];
  if (last?.role === 'user' && tools.length > 0) {
    return {
      toolCalls: tools.map((t) => ({
        name: t.function.name,
        arguments: JSON.stringify(exampleOf(t.function.parameters ?? {}, '')),
      })),
    };
  }
  if (last?.role === 'tool') {
    const results: string[] = [];
    for (let i = messages.length - 1; i >= 0 && messages[i]?.role === 'tool'; i--) {
      results.unshift(String(messages[i]?.content ?? '').slice(0, 300));
    }
    return { text: `Done. The tools answered: ${results.join('; ')}` };
  }
  const said = [...messages].reverse().find((m) => m.role === 'user')?.content;
  return { text: `Hello from the fake model. You said: "${String(said ?? '').slice(0, 200)}"` };
}

const PARAGRAPH = Array.from(
  { length: 150 },
  (_, i) => ['the', 'fake', 'model', 'wrote', 'this', 'demo', 'text', 'for', 'you'][i % 9],
).join(' ');
const LONG_TEXT = /summary|body|content|notes|description|text|report/i;

/** A plausible instance of a JSON Schema: examples and defaults first, then by type. */
export function exampleOf(schema: any, name: string): unknown {
  if (!schema || typeof schema !== 'object') return {};
  if (Array.isArray(schema.examples) && schema.examples.length > 0) return schema.examples[0];
  if (schema.default !== undefined) return schema.default;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  const type = Array.isArray(schema.type) ? schema.type.find((t: string) => t !== 'null') : schema.type;
  switch (type) {
    case 'object':
    case undefined: {
      const out: Record<string, unknown> = {};
      for (const [key, sub] of Object.entries(schema.properties ?? {})) out[key] = exampleOf(sub, key);
      return out;
    }
    case 'array':
      return Array.from({ length: Math.max(1, schema.minItems ?? 1) }, () => exampleOf(schema.items, name));
    case 'integer':
    case 'number':
      return schema.minimum ?? 1;
    case 'boolean':
      return true;
    default: {
      if (/filename/i.test(name)) return 'report.md';
      const text = LONG_TEXT.test(name) ? PARAGRAPH : `example ${name || 'value'}`.trim();
      return typeof schema.maxLength === 'number' ? text.slice(0, schema.maxLength) : text;
    }
  }
}
