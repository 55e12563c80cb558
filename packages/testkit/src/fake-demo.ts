import type { FakeChatReply } from './fake-openai.js';

/**
 * The fake model's demo mode, for trying the service and the examples without a provider
 * (`pnpm fake-model`). Deterministic and schema-driven, no intelligence: a user turn that
 * offers tools calls each of them once with arguments made from its JSON Schema; after tool
 * results it answers with a summary of them; a structured-output request gets an instance of
 * the requested schema; a question over numbered sources (document QA) is answered with the
 * source sentence sharing most words with it, cited; anything else is echoed back.
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
  if (last?.role === 'user' && typeof last.content === 'string') {
    const grounded = groundedReply(last.content, messages);
    if (grounded) return grounded;
  }
  const said = [...messages].reverse().find((m) => m.role === 'user')?.content;
  return { text: `Hello from the fake model. You said: "${String(said ?? '').slice(0, 200)}"` };
}

const DEMO_STOPWORDS = new Set(
  'a an and are as at be by can did do does for from has have how i in is it its me my of on or our the their there this to was we were what when where which who why will with you your'.split(
    ' ',
  ),
);
/** Words without stop words, a plural or third-person `s` dropped (tents = tent, lasts = last). */
const wordsOf = (text: string) =>
  (text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [])
    .filter((w) => !DEMO_STOPWORDS.has(w))
    .map((w) => (w.length > 3 && w.endsWith('s') && !w.endsWith('ss') ? w.slice(0, -1) : w));

/**
 * Document QA in demo mode: a user turn of `[n] <document>, page <p>:` sources followed by
 * `Question: …` (the RAG prompt, docs/rag.md). Answers with the source sentence that shares the
 * most words with the question, cited as `[n]`; when no sentence shares a word, the reply the
 * system prompt asks for when the sources do not hold the answer (`reply exactly X`).
 */
function groundedReply(content: string, messages: { role: string; content?: unknown }[]) {
  const q = /\n\nQuestion: ([\s\S]*)$/.exec(content);
  if (!content.startsWith('Sources:') || !q) return undefined;
  const question = new Set(wordsOf(q[1] ?? ''));
  const body = content.slice(0, q.index);
  let best: { n: string; sentence: string; score: number } | undefined;
  for (const m of body.matchAll(/^\[(\d+)\] [^\n]*\n([\s\S]*?)(?=\n\n\[\d+\] |$(?![\s\S]))/gm)) {
    // Markdown headings are titles, not statements: left out of the candidate sentences. A
    // chunk may run them into the text (`## Warranty Every…`): the marker and the words after
    // it up to the next capitalised one go.
    const text = (m[2] ?? '')
      .replace(/#{1,6}\s+\S+(?:\s+(?![A-Z#])\S+)*\s*/g, ' ')
      .replace(/\s+/g, ' ')
      .trim();
    for (const sentence of text.split(/(?<=[.!?])\s+/)) {
      const score = new Set(wordsOf(sentence).filter((w) => question.has(w))).size;
      if (score > (best?.score ?? 0)) best = { n: m[1] as string, sentence, score };
    }
  }
  if (best) return { text: `${best.sentence.replace(/[.!?]?$/, '')} [${best.n}].` };
  const system = messages.find((m) => m.role === 'system')?.content;
  const marker = typeof system === 'string' ? /reply exactly (\S+)/.exec(system)?.[1] : undefined;
  return { text: marker ?? 'The sources do not say.' };
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
