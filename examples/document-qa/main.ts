/**
 * examples/document-qa: questions answered from your documents, with their sources.
 *
 *   AI_SUITE_EMAIL=… AI_SUITE_PASSWORD=… pnpm --filter @ai-suite/example-document-qa start -- [files…] [--ask "question"]…
 *
 * Signs in as a person (`client.auth.signIn`: RAG takes sessions, not API keys), uploads the
 * documents to the workspace's index (`client.rag.upload`; a document of the same name is
 * replaced), lists the index (`client.rag.documents.list`, waiting until every document is
 * indexed), then asks each question (`client.rag.query`) and prints the answer, its confidence
 * and the sources it cites: document and page. Without files it uploads a sample: a three-page
 * tent manual as a PDF made on the fly (bytes) and `docs/faq.md` (a path), with questions
 * about them, one of which the documents cannot answer.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { AiSuite, PermissionDeniedError, type RagFileInput, type RagQueryResult } from '@ai-suite/sdk';
import { PDFDocument, StandardFonts } from 'pdf-lib';

const HERE = path.dirname(fileURLToPath(import.meta.url));

/** The sample manual, one string per page. */
export const MANUAL_PAGES = [
  'Trailhead 2 tent: what is in the box. The Trailhead 2 tent comes with 12 aluminium pegs, four guy lines, ' +
    'two colour-coded poles, a repair sleeve for the poles and a compression bag. The packed tent weighs 1.9 kg.',
  'Pitching the tent. Lay the footprint on flat ground with the door facing away from the wind. Insert the ' +
    'red pole into the red sleeve and the blue pole into the blue sleeve, then clip the inner tent to the poles. ' +
    'Stake the four corners before the guy lines. Pitching takes about ten minutes with two people.',
  'Care and storage. Never pack the tent away wet: dry it within 24 hours to avoid mildew. Clean the fly ' +
    'with lukewarm water and a sponge, without detergent. Store the tent loosely in a cool, dry place, not in ' +
    'its compression bag.',
];

export const SAMPLE_QUESTIONS = [
  'How many pegs come with the Trailhead 2 tent?',
  'How long should I wait before storing a wet tent?',
  'How long is the warranty on tents?',
  'What is the capital of Peru?',
];

/** A PDF whose pages carry the given texts (pdf-lib), wrapped at ~90 characters a line. */
export async function buildPdf(pages: string[]): Promise<Uint8Array> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  for (const text of pages) {
    const page = doc.addPage([612, 792]);
    const lines: string[] = [];
    let line = '';
    for (const word of text.split(/\s+/)) {
      if (line && line.length + word.length + 1 > 90) {
        lines.push(line);
        line = word;
      } else line = line ? `${line} ${word}` : word;
    }
    if (line) lines.push(line);
    lines.forEach((l, i) => {
      page.drawText(l, { x: 50, y: 740 - i * 14, size: 11, font });
    });
  }
  return doc.save();
}

const nameOf = (f: RagFileInput) =>
  typeof f === 'string' ? path.basename(f) : 'name' in f ? String(f.name) : String(f.path);

const chunks = (n: number) => `${n} chunk${n === 1 ? '' : 's'}`;

export interface DocumentQaOptions {
  client: AiSuite;
  files: RagFileInput[];
  questions: string[];
  log?: (line: string) => void;
  /** How long to wait for documents still being indexed (ms, default 120 000). */
  indexTimeoutMs?: number;
}

export async function documentQa(opts: DocumentQaOptions): Promise<RagQueryResult[]> {
  const { client } = opts;
  const log = opts.log ?? (() => {});

  // Re-running the example replaces the documents instead of piling up copies.
  const names = new Set(opts.files.map(nameOf));
  const existing = await client.rag.documents.list().then(
    (r) => r.documents,
    (err) => {
      if (err instanceof PermissionDeniedError) return []; // no index yet: the first upload makes it
      throw err;
    },
  );
  for (const d of existing.filter((d) => names.has(d.name))) {
    await client.rag.documents.delete(d.id);
    log(`replaced ${d.name}`);
  }

  const up = await client.rag.upload(opts.files);
  for (const r of up.results.details) {
    log(
      r.status === 'completed'
        ? `uploaded ${r.filename}: ${chunks(r.chunks)}`
        : `could not upload ${r.filename}: ${r.error}`,
    );
  }

  // Indexing may continue after the upload answers: wait until no document is pending.
  const deadline = Date.now() + (opts.indexTimeoutMs ?? 120_000);
  let { documents } = await client.rag.documents.list();
  while (documents.some((d) => d.status === 'queued' || d.status === 'processing')) {
    if (Date.now() > deadline) throw new Error('Documents are still being indexed: try again later');
    await new Promise((r) => setTimeout(r, 500));
    ({ documents } = await client.rag.documents.list());
  }
  log(`${documents.length} documents in the index:`);
  for (const d of documents) {
    log(`  ${d.name}  ${d.status}  ${chunks(d.chunks)}${d.error ? `  (${d.error})` : ''}`);
  }

  const answers: RagQueryResult[] = [];
  for (const question of opts.questions) {
    // Default options: up to 5 sources with relevance_score ≥ 0.7 (docs/rag.md).
    const answer = await client.rag.query({ query: question });
    const { result } = answer;
    log('');
    log(`Q: ${question}`);
    log(`A: ${result.answer}`);
    log(`   confidence ${result.confidence.toFixed(2)}, ${answer.performance.total_ms} ms`);
    result.sources.forEach((s, i) => {
      log(`   [${i + 1}] ${s.document}, page ${s.page} (relevance ${s.relevance_score.toFixed(2)})`);
    });
    answers.push(answer);
  }
  return answers;
}

const isMain = process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (isMain) {
  // parseArgs ends options at `--`, so a stray one from `pnpm … start -- …` is dropped first.
  const args = process.argv.slice(2);
  if (args[0] === '--') args.shift();
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { ask: { type: 'string', short: 'q', multiple: true } },
  });
  const email = process.env.AI_SUITE_EMAIL;
  const password = process.env.AI_SUITE_PASSWORD;
  const main = async () => {
    if (!email || !password) throw new Error('Set AI_SUITE_EMAIL and AI_SUITE_PASSWORD (see the README)');
    // Sign in, then act with the session only: an AI_SUITE_API_KEY in the environment would
    // otherwise take precedence, and RAG refuses API keys.
    const signedIn = await new AiSuite().auth.signIn({ email, password });
    const client = new AiSuite({ sessionToken: signedIn.token });
    console.log(`signed in as ${signedIn.user.email}, workspace ${signedIn.workspace?.name ?? '(none)'}`);
    const sample = positionals.length === 0;
    const files: RagFileInput[] = sample
      ? [
          { name: 'trailhead-manual.pdf', content: await buildPdf(MANUAL_PAGES) },
          path.join(HERE, 'docs', 'faq.md'),
        ]
      : positionals.map((p) => path.resolve(process.env.INIT_CWD ?? process.cwd(), p));
    const questions = values.ask ?? (sample ? SAMPLE_QUESTIONS : []);
    await documentQa({ client, files, questions, log: (l) => console.log(l) });
  };
  main().catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
