import { RateLimiterPostgres, type RateLimiterRes } from 'rate-limiter-flexible';
import type { Database } from '../db/orm.js';
import { appError } from '../errors/index.js';
import type { IdentitySettings } from './settings.js';
import { sha256Hex } from './tokens.js';

/**
 * Throttling of failed sign-ins, per account (the email given, known or not, so the answer
 * never tells whether an account exists) and per client address. Counters live in PostgreSQL
 * (`sign_in_failures`, created by a migration) through rate-limiter-flexible's Postgres store,
 * so every server process and a restart see the same counts; the library brings the atomic
 * upsert-with-expiry, windows and retry-after arithmetic. Queries go through the server's plain
 * `pg` pool (`db.sql`), which on the embedded database runs them as prepared statements.
 */
export class SignInThrottle {
  private readonly account: RateLimiterPostgres;
  private readonly address: RateLimiterPostgres;

  constructor(db: Database, settings: IdentitySettings['signIn']) {
    const storeClient = {
      query: async (q: { text: string; values?: unknown[] }) => {
        const rows = await db.sql.execute<Record<string, unknown>[]>(q.text, q.values ?? []);
        return { rows, rowCount: rows.length };
      },
    };
    const common = {
      storeClient,
      storeType: 'client',
      tableName: 'sign_in_failures',
      tableCreated: true,
      clearExpiredByTimeout: false,
      duration: settings.windowSeconds,
    };
    this.account = new RateLimiterPostgres({
      ...common,
      keyPrefix: 'account',
      points: settings.maxFailuresPerAccount,
    });
    this.address = new RateLimiterPostgres({
      ...common,
      keyPrefix: 'address',
      points: settings.maxFailuresPerAddress,
    });
  }

  private static blocked(res: RateLimiterRes | null, limit: number): number {
    return res && res.consumedPoints >= limit ? Math.max(1, Math.ceil(res.msBeforeNext / 1000)) : 0;
  }

  /** 429 with `Retry-After` when the account or the address has used up its failures. */
  async assertAllowed(email: string, address: string | null): Promise<void> {
    const [a, b] = await Promise.all([
      this.account.get(accountKey(email)),
      address ? this.address.get(address) : Promise.resolve(null),
    ]);
    const wait = Math.max(
      SignInThrottle.blocked(a, this.account.points),
      SignInThrottle.blocked(b, this.address.points),
    );
    if (wait > 0) {
      throw appError('SIGN_IN_THROTTLED', {
        details: { retryAfterSeconds: wait },
        headers: { 'Retry-After': String(wait) },
      });
    }
  }

  /** Counts a failure against both. */
  async failed(email: string, address: string | null): Promise<void> {
    await Promise.all([
      this.account.penalty(accountKey(email), 1),
      address ? this.address.penalty(address, 1) : Promise.resolve(),
    ]);
  }

  /** A success clears the account's failures (not the address's: one good account does not open it). */
  async succeeded(email: string): Promise<void> {
    await this.account.delete(accountKey(email));
  }
}

/** Accounts are counted by a hash of the normalised email: fixed length, no address stored. */
const accountKey = (email: string) => sha256Hex(email.trim().toLowerCase());

const throttles = new WeakMap<Database, SignInThrottle>();

/** The throttle of a server (one per database handle). */
export function signInThrottle(db: Database, settings: IdentitySettings['signIn']): SignInThrottle {
  let t = throttles.get(db);
  if (!t) {
    t = new SignInThrottle(db, settings);
    throttles.set(db, t);
  }
  return t;
}
