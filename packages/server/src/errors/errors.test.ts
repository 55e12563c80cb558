import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { withErrorTable } from './doc.js';
import { AppError, appError, ERRORS, type ErrorKey } from './index.js';

const DOC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../../docs/errors.md');

describe('the error table', () => {
  it('docs/errors.md carries the current table (else: pnpm --filter @ai-suite/server errors-doc)', () => {
    const doc = fs.readFileSync(DOC, 'utf8');
    expect(withErrorTable(doc)).toBe(doc);
  });

  it('an error takes status, code and message from its key, placeholders filled', () => {
    const e = appError('RUN_NOT_ACTIVE', { status: 'completed' });
    expect(e).toBeInstanceOf(AppError);
    expect(e).toMatchObject({ status: 400, code: undefined, message: 'Run is completed' });
    expect(e.toBody()).toEqual({ error: 'Run is completed' });
    const nf = appError('APP_NOT_FOUND', { details: { appId: 'x' } });
    expect(JSON.stringify(nf.toBody())).toBe(
      '{"error":"App not found in this workspace","code":"APP_NOT_FOUND","details":{"appId":"x"}}',
    );
  });

  it('one INSUFFICIENT_CREDITS: the spec wording, and the apps chat variant the spec gives', () => {
    expect(appError('INSUFFICIENT_CREDITS').toBody()).toEqual({
      error: 'Insufficient credits. Please purchase additional credits to continue.',
      code: 'INSUFFICIENT_CREDITS',
    });
    expect(appError('INSUFFICIENT_CREDITS', { variant: 'appsChat' }).toBody()).toEqual({
      error: 'Insufficient credits',
      code: 'INSUFFICIENT_CREDITS',
    });
  });

  it("a placeholder's value is not read as a placeholder again", () => {
    expect(appError('INVALID_BRANCH', { ref: '{ref}' }).message).toBe('Invalid branch "{ref}"');
  });

  it('headers of the table and of the call are merged', () => {
    expect(appError('SERVICE_UNAVAILABLE').headers).toEqual({ 'Retry-After': '5' });
    expect(appError('RATE_LIMITED', { headers: { 'Retry-After': '3' } }).headers).toEqual({
      'Retry-After': '3',
    });
  });

  it('every entry is well formed: a 4xx/5xx status, a SCREAMING_SNAKE code, a message', () => {
    for (const [key, def] of Object.entries(ERRORS) as [ErrorKey, (typeof ERRORS)[ErrorKey]][]) {
      expect(key).toMatch(/^[A-Z][A-Z0-9_]*$/);
      expect(def.status).toBeGreaterThanOrEqual(400);
      expect(def.status).toBeLessThan(600);
      if ('code' in def) expect(def.code).toMatch(/^[A-Z][A-Z0-9_]*$/);
      expect(def.message.length).toBeGreaterThan(0);
    }
  });
});
