import { randomBytes } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';

/** Reads the shared signing secret, creating it once per database (all processes agree). */
export async function ensureSigningSecret(em: EntityManager, configured: string | undefined) {
  if (configured) return configured;
  const conn = em.getConnection();
  await conn.execute(
    "insert into server_settings (key, value) values ('signing_secret', ?) on conflict (key) do nothing",
    [randomBytes(32).toString('base64url')],
  );
  const rows = await conn.execute<{ value: string }[]>(
    "select value from server_settings where key = 'signing_secret'",
  );
  return rows[0]?.value as string;
}
