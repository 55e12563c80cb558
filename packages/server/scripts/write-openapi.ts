/**
 * Writes the committed OpenAPI document (docs/openapi.json). The SDK's types are generated
 * from it, and CI fails when either is out of date (`pnpm openapi` then `git diff`).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildOpenApiDocument } from '../src/openapi.js';

const out = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../docs/openapi.json');
fs.writeFileSync(out, `${JSON.stringify(buildOpenApiDocument(), null, 2)}\n`);
process.stdout.write(`wrote ${path.relative(process.cwd(), out)}\n`);
