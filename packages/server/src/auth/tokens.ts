import { createHash, randomInt } from 'node:crypto';

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/**
 * `prefix` + `length` characters drawn uniformly from [A-Za-z0-9] with a CSPRNG: the shape of
 * every bearer secret the service issues (API keys, widget tokens, session tokens). The
 * prefix tells the kind of a presented token before any lookup.
 */
export function randomToken(prefix: string, length: number): string {
  let body = '';
  for (let i = 0; i < length; i++) body += BASE62[randomInt(BASE62.length)];
  return prefix + body;
}

/**
 * How bearer secrets are stored: one unsalted SHA-256 (decision 0002). They are
 * high-entropy random strings, so a slow or salted hash adds no security and would turn the
 * one indexed lookup into a scan.
 */
export const sha256Hex = (value: string) => createHash('sha256').update(value).digest('hex');
