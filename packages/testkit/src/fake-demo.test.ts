import { describe, expect, it } from 'vitest';
import { demoReply } from './fake-demo.js';

const system =
  'You answer questions using only the numbered sources given with the question. ' +
  'If the sources do not contain the answer, reply exactly NOT_IN_DOCUMENTS and nothing else.';
const sources =
  'Sources:\n\n[1] handbook.pdf, page 2:\nThe office opens at nine. Returns are accepted within 30 days of purchase.\n\n' +
  '[2] faq.md, page 1:\n## Shipping and warranty\n\nShipping is free.\nThe warranty lasts two years from delivery.';
const ask = (question: string) =>
  demoReply({
    messages: [
      { role: 'system', content: system },
      { role: 'user', content: `${sources}\n\nQuestion: ${question}` },
    ],
  });

describe('demo mode: questions over numbered sources', () => {
  it('answers with the source sentence sharing most words with the question, cited', () => {
    expect(ask('How long does the warranty last?')).toEqual({
      text: 'The warranty lasts two years from delivery [2].',
    });
    expect(ask('Within how many days are returns accepted?')).toEqual({
      text: 'Returns are accepted within 30 days of purchase [1].',
    });
    // A heading run into the text, as a chunk joins sentences: not part of the answer.
    expect(
      demoReply({
        messages: [
          { role: 'system', content: system },
          {
            role: 'user',
            content:
              'Sources:\n\n[1] faq.md, page 1:\n# Shop FAQ ## Orders and shipping Orders ship daily. ## Warranty Every tent has a three-year warranty.\n\nQuestion: How long is the warranty on tents?',
          },
        ],
      }),
    ).toEqual({ text: 'Every tent has a three-year warranty [1].' });
  });

  it("replies the system prompt's not-found marker when no sentence shares a word", () => {
    expect(ask('Who is the chief executive?')).toEqual({ text: 'NOT_IN_DOCUMENTS' });
  });

  it('leaves other turns to the echo', () => {
    expect(demoReply({ messages: [{ role: 'user', content: 'Say hello' }] })).toEqual({
      text: 'Hello from the fake model. You said: "Say hello"',
    });
  });
});
