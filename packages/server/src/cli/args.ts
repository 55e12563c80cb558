import { InvalidArgumentError } from 'commander';
import { parseTokenQuota, usdToMicros } from '../domains/workspaces/amounts.js';
import { AppError } from '../errors/index.js';

// Argument parsers of the CLI's commands: they reject bad values before the database is touched.

const fromAppError =
  <T>(parse: (v: string) => T) =>
  (value: string): T => {
    try {
      return parse(value);
    } catch (err) {
      if (err instanceof AppError) throw new InvalidArgumentError(err.message);
      throw err;
    }
  };

export const parseUsd = fromAppError((v) => usdToMicros(v));
export const parsePositiveUsd = fromAppError((v) => {
  const micros = usdToMicros(v);
  if (micros <= 0) throw new InvalidArgumentError('Credit amount must be greater than zero');
  return micros;
});
export const parseQuota = fromAppError((v) => parseTokenQuota(v));
export const parseEmail = (v: string) => {
  const email = v.trim().toLowerCase();
  if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email)) throw new InvalidArgumentError(`Invalid email "${v}"`);
  return email;
};
export const parseName = (what: string) => (v: string) => {
  const s = v.trim();
  if (!s) throw new InvalidArgumentError(`${what} must not be empty`);
  if (s.length > 200) throw new InvalidArgumentError(`${what} must be at most 200 characters`);
  return s;
};
