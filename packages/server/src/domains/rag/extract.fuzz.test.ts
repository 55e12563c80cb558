import { Readable } from 'node:stream';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { documentBatches } from './document-chunks.js';
import { buildDocx, buildPdf } from './documents.fixture.js';
import type { DocumentKind } from './extract.js';
import { inspectDocument } from './inspect.js';
import { DEFAULT_LIMITS, type DocumentLimits, ExtractionError } from './limits.js';

/**
 * Property-based: whatever the bytes, the extractors end in chunks or an `ExtractionError`
 * (`LimitError` included), never another exception, a hang or a crash of the process. Random
 * bytes and mutations (bytes overwritten, inserted, cut) of a valid file of every kind.
 */

const LIMITS: DocumentLimits = {
  ...DEFAULT_LIMITS,
  maxPdfPages: 50,
  maxOoxmlPartBytes: 2 * 1024 * 1024,
  maxOoxmlTotalBytes: 4 * 1024 * 1024,
  maxChars: 2_000_000,
  maxChunks: 5000,
};

async function outcome(kind: DocumentKind, bytes: Uint8Array): Promise<'chunks' | 'refused'> {
  const buf = Buffer.from(bytes);
  const pieces: Buffer[] = [];
  for (let i = 0; i < buf.length; i += 4096) pieces.push(buf.subarray(i, i + 4096));
  try {
    for await (const batch of documentBatches(Readable.from(pieces), { kind, limits: LIMITS, batch: 64 })) {
      for (const c of batch) {
        expect(typeof c.content).toBe('string');
        expect(c.content.length).toBeLessThanOrEqual(1000);
      }
    }
    return 'chunks';
  } catch (err) {
    if (err instanceof ExtractionError) return 'refused';
    throw err;
  }
}

/** A valid file with some of its bytes overwritten, some inserted, or its end cut off. */
const mutated = (seed: Buffer) =>
  fc.oneof(
    fc
      .array(fc.tuple(fc.nat({ max: seed.length - 1 }), fc.integer({ min: 0, max: 255 })), {
        minLength: 1,
        maxLength: 40,
      })
      .map((edits) => {
        const b = Buffer.from(seed);
        for (const [at, v] of edits) b[at] = v;
        return new Uint8Array(b);
      }),
    fc
      .tuple(fc.nat({ max: seed.length }), fc.uint8Array({ minLength: 1, maxLength: 64 }))
      .map(([at, ins]) => {
        return new Uint8Array(Buffer.concat([seed.subarray(0, at), ins, seed.subarray(at)]));
      }),
    fc.nat({ max: seed.length }).map((at) => new Uint8Array(seed.subarray(0, at))),
  );

const seeds = {} as Record<DocumentKind, Buffer>;
beforeAll(async () => {
  seeds.pdf = await buildPdf(['The kettle is blue. It boils water.', 'Page two has a table: a, b, c.']);
  seeds.docx = await buildDocx([
    { paragraph: 'Quarterly report' },
    {
      table: [
        ['Region', 'Revenue'],
        ['North', '120'],
      ],
    },
  ]);
  seeds.csv = Buffer.from('id,name,"note, quoted"\n1,Ada,"x ""y"""\n2,Bob,z\n');
  seeds.json = Buffer.from(JSON.stringify({ a: [1, { b: 'c', d: [true, null] }], e: 'f' }));
  seeds.text = Buffer.from('Ärger über Straße — naïve café. Second sentence! Third?\n');
  seeds.markdown = Buffer.from('# Title\n\n- item one\n- item two\n\n```js\ncode();\n```\n');
}, 60_000);

const KINDS: DocumentKind[] = ['pdf', 'docx', 'csv', 'json', 'text', 'markdown'];

describe('extractors under random and mutated bytes (fast-check)', () => {
  for (const kind of KINDS) {
    it(`${kind}: chunks or an ExtractionError, never anything else`, async () => {
      const seed = seeds[kind];
      await fc.assert(
        fc.asyncProperty(fc.oneof(fc.uint8Array({ maxLength: 4096 }), mutated(seed)), async (bytes) => {
          expect(['chunks', 'refused']).toContain(await outcome(kind, bytes));
          // The checks on the first bytes never throw either.
          const early = await inspectDocument({
            kind,
            limits: LIMITS,
            head: bytes,
            tail: bytes,
            size: bytes.length,
          });
          expect(early === undefined || early instanceof ExtractionError).toBe(true);
        }),
        { numRuns: kind === 'pdf' || kind === 'docx' ? 60 : 150 },
      );
    }, 240_000);
  }
});
