import { appError } from '../../errors/index.js';

/** Money is integer micro-dollars everywhere; dollars only at the edges. */
export const MICROS_PER_USD = 1_000_000;

/** Parses a dollar amount ("12.50") into integer micro-dollars without float drift. */
export function usdToMicros(input: string | number): number {
  const s = String(input).trim();
  const m = /^(\d+)(?:\.(\d{1,6}))?$/.exec(s);
  if (!m) throw appError('INVALID_AMOUNT', { s });
  const whole = Number(m[1]);
  const frac = Number((m[2] ?? '').padEnd(6, '0'));
  const micros = whole * MICROS_PER_USD + frac;
  if (!Number.isSafeInteger(micros)) throw appError('AMOUNT_IS_TOO_LARGE', { s });
  return micros;
}

export function parseTokenQuota(input: string | number | null): number | null {
  if (input === null || input === 'unlimited' || input === 'none') return null;
  const n = Number(input);
  if (!Number.isSafeInteger(n) || n < 0) {
    throw appError('INVALID_TOKEN_QUOTA', { input });
  }
  return n;
}
