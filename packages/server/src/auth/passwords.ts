import { hash, verify } from '@node-rs/argon2';
import { appError } from '../errors/index.js';

/** NIST SP 800-63B: at least 8 characters; a ceiling keeps the hash's input bounded. */
export const PASSWORD_MIN_LENGTH = 8;
export const PASSWORD_MAX_LENGTH = 256;

/** Refuses a password a person may not choose (400 with the rule). */
export function assertAcceptablePassword(password: string): void {
  if (password.length < PASSWORD_MIN_LENGTH) {
    throw appError('WEAK_PASSWORD', { PASSWORD_MIN_LENGTH });
  }
  if (password.length > PASSWORD_MAX_LENGTH) {
    throw appError('INVALID_PASSWORD', { PASSWORD_MAX_LENGTH });
  }
}

/** argon2id with the library's defaults (decision 0002). */
export const hashPassword = (password: string) => hash(password);

let dummyHash: Promise<string> | undefined;

/** Makes the stand-in hash `verifyPassword` checks against (at start, so no request pays it). */
export function prepareDummyHash(): Promise<string> {
  dummyHash ??= hash(crypto.randomUUID());
  return dummyHash;
}

/**
 * Checks a password against a stored hash. With no hash (unknown email, or a user who only
 * signs in through OIDC) it verifies against a hash of a random string made once with the same
 * parameters, so every failed sign-in costs the same argon2 work and answers in the same time:
 * the timing does not tell whether the account exists.
 */
export async function verifyPassword(
  storedHash: string | null | undefined,
  password: string,
): Promise<boolean> {
  if (storedHash) {
    try {
      return await verify(storedHash, password);
    } catch {
      return false;
    }
  }
  await verify(await prepareDummyHash(), password).catch(() => false);
  return false;
}
