/**
 * Writes the generated error table into docs/errors.md (between its markers). A test fails
 * when the committed document and packages/server/src/errors/table.ts drift apart.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { withErrorTable } from '../src/errors/doc.js';

const file = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../docs/errors.md');
fs.writeFileSync(file, withErrorTable(fs.readFileSync(file, 'utf8')));
process.stdout.write(`wrote ${path.relative(process.cwd(), file)}\n`);
