/**
 * Tests only: the document worker, except that it crashes while loading as long as the file
 * named by `DOCUMENT_WORKER_CRASHES` holds a count above zero (each crash takes one off), as
 * a worker killed at start would (a crash in module load, an out-of-memory at spawn).
 */
import fs from 'node:fs';

const file = process.env.DOCUMENT_WORKER_CRASHES;
const left = file && fs.existsSync(file) ? Number(fs.readFileSync(file, 'utf8')) : 0;
if (file && left > 0) {
  fs.writeFileSync(file, String(left - 1));
  throw new Error('the document worker crashed while loading');
}

export { default, inspect } from './document-worker.js';
