import mammoth from 'mammoth';
import { buildDocx } from './src/domains/rag/documents.fixture.js';

const n = Number(process.argv[2]);
const para =
  'Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore.';
const blocks = Array.from({ length: n }, (_, i) => ({ paragraph: `${i} ${para}` }));
const buf = await buildDocx(blocks);
const t = performance.now();
global.gc?.();
const before = process.memoryUsage();
const html = (await mammoth.convertToHtml({ buffer: buf })).value;
const after = process.memoryUsage();
console.log({
  n,
  docx: buf.length,
  xmlApprox: n * 160,
  html: html.length,
  ms: Math.round(performance.now() - t),
  heapPeakish: (after.heapUsed - before.heapUsed) >> 20,
  rss: after.rss >> 20,
});
