import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';

/**
 * Secrets stored at rest (tool-server auth headers): AES-256-GCM under a key derived with
 * HKDF-SHA256 from the server's signing secret and a purpose label, so the database alone never
 * reveals them and a tampered ciphertext fails authentication. Format: `v1.<iv>.<tag>.<data>`
 * (base64url). Changing `SIGNING_SECRET` makes stored secrets unreadable (re-enter them).
 */
const keyFor = (signingSecret: string, purpose: string) =>
  Buffer.from(hkdfSync('sha256', signingSecret, 'ai-suite', `secret-box:${purpose}`, 32));

export function sealSecret(signingSecret: string, purpose: string, plaintext: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', keyFor(signingSecret, purpose), iv);
  const data = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return ['v1', iv, cipher.getAuthTag(), data]
    .map((p) => (typeof p === 'string' ? p : p.toString('base64url')))
    .join('.');
}

/** The plaintext, or undefined when the value was not sealed with this secret and purpose. */
export function openSecret(signingSecret: string, purpose: string, sealed: string): string | undefined {
  const [v, iv, tag, data] = sealed.split('.');
  if (v !== 'v1' || !iv || !tag || data === undefined) return undefined;
  try {
    const decipher = createDecipheriv(
      'aes-256-gcm',
      keyFor(signingSecret, purpose),
      Buffer.from(iv, 'base64url'),
    );
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(data, 'base64url')), decipher.final()]).toString(
      'utf8',
    );
  } catch {
    return undefined;
  }
}
