import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashApiKey } from '../auth/api-keys.js';
import type { SqlExecutor } from '../db/sql.js';
import type { AppError } from '../errors/index.js';
import { createTestWorkspace, startTestServer, type TestServer } from '../test/harness.js';
import { AdmissionBatcher } from './admission-batch.js';
import type { RateLimitRule } from './settings.js';
import type { KeyAdmission } from './types.js';

/**
 * `AdmissionBatcher` against the real database: bursts of concurrent `/chat` admissions go in
 * a few statements, and each request is answered as the one-request statement would have
 * answered it had the burst run one request after another.
 */
let ts: TestServer;
beforeAll(async () => {
  ts = await startTestServer({ env: { CHAT_MODEL: 'm' } });
});
afterAll(() => ts?.close());

const WINDOW = 100_000_000; // no window boundary falls inside a test

/** The pool, counting the statements run through it. */
function counted(): { db: () => SqlExecutor; statements: () => number } {
  let n = 0;
  const sql = ts.server.deps.db.sql;
  const exec: SqlExecutor = {
    execute: <T>(q: string, params?: unknown[]) => {
      n++;
      return sql.execute<T>(q, params);
    },
  };
  return { db: () => exec, statements: () => n };
}

const rules = (chat: RateLimitRule) => ({
  chat,
  session_create: { limit: 0, windowSeconds: WINDOW },
  agent_message: { limit: 0, windowSeconds: WINDOW },
  app_chat: { limit: 0, windowSeconds: WINDOW },
});

/** The hits a request's RateLimit-Remaining says it saw, or `limit + 1` for a 429. */
function hitsOf(a: KeyAdmission, limit: number): number {
  try {
    return limit - Number(a.limit()['RateLimit-Remaining']);
  } catch (err) {
    expect((err as AppError).status).toBe(429);
    return limit + 1;
  }
}

describe('batched key admissions', () => {
  it('counts a burst of 300 exactly (limit 120): each request sees its own count, 120 admitted, in a few statements', async () => {
    const ws = await createTestWorkspace(ts);
    const other = await createTestWorkspace(ts);
    const { db, statements } = counted();
    const batcher = new AdmissionBatcher(db, rules({ limit: 120, windowSeconds: WINDOW }));
    const hash = hashApiKey(ws.apiKey);
    const results = await Promise.all([
      ...Array.from({ length: 300 }, () => batcher.admit(hash, 'chat', true, 10)),
      // Another workspace in the same batches counts on its own row.
      ...Array.from({ length: 20 }, () => batcher.admit(hashApiKey(other.apiKey), 'chat', true, 10)),
      // Invalid requests (a 400 to come) resolve the key and take no unit.
      ...Array.from({ length: 10 }, () => batcher.admit(hash, 'chat', false, 10)),
      // Unknown and malformed keys: no admission (401).
      batcher.admit(hashApiKey(`svc_ai_${'x'.repeat(64)}`), 'chat', true, 10),
    ]);
    const mine = results.slice(0, 300) as KeyAdmission[];
    expect(
      mine.every((a) => a?.principal.workspaceId === ws.workspaceId && a.principal.keyId === ws.keyId),
    ).toBe(true);
    // Every count from 1 to 120 seen once, the rest refused.
    const seen = mine.map((a) => hitsOf(a, 120)).sort((a, b) => a - b);
    expect(seen.slice(0, 120)).toEqual(Array.from({ length: 120 }, (_, i) => i + 1));
    expect(seen.slice(120).every((h) => h === 121)).toBe(true);
    const theirs = (results.slice(300, 320) as KeyAdmission[])
      .map((a) => hitsOf(a, 120))
      .sort((a, b) => a - b);
    expect(theirs).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    for (const a of results.slice(320, 330) as KeyAdmission[]) {
      expect(a.principal.workspaceId).toBe(ws.workspaceId);
      expect(a.limit()).toEqual({});
    }
    expect(results[330]).toBeUndefined();
    // The window's row holds every unit taken (the refused requests' too, as one at a time).
    const [row] = await ts.server.deps
      .em()
      .execute<{ hits: number }[]>('select hits from rate_limit_windows where key = ?', [
        `chat:${ws.workspaceId}`,
      ]);
    expect(Number(row?.hits)).toBe(300);
    // Batched: far fewer statements than requests.
    expect(statements()).toBeLessThan(100);
  });

  it('takes every unit of a sharded limit (≥ 10,000) in batches; a count never exceeds the units taken', async () => {
    const ws = await createTestWorkspace(ts);
    const batcher = new AdmissionBatcher(counted().db, rules({ limit: 10_000, windowSeconds: WINDOW }));
    const hash = hashApiKey(ws.apiKey);
    const results = (await Promise.all(
      Array.from({ length: 200 }, () => batcher.admit(hash, 'chat', true, 10)),
    )) as KeyAdmission[];
    // Statements in flight together on different shards see each other's units once committed
    // (decision 0031), so the counts are exact only within a batch; none is lost or invented.
    const seen = results.map((a) => hitsOf(a, 10_000));
    expect(seen.every((h) => h >= 1 && h <= 200)).toBe(true);
    expect(Math.max(...seen)).toBeGreaterThanOrEqual(100);
    const [row] = await ts.server.deps
      .em()
      .execute<{ hits: string }[]>('select sum(hits) as hits from rate_limit_windows where key like ?', [
        `chat:${ws.workspaceId}:s%`,
      ]);
    expect(Number(row?.hits)).toBe(200);
  });

  it('reserves the token quota of admitted requests only while used plus reserved is below it', async () => {
    const ws = await createTestWorkspace(ts, { monthlyTokenQuota: 1000 });
    const batcher = new AdmissionBatcher(counted().db, rules({ limit: 50, windowSeconds: WINDOW }));
    const hash = hashApiKey(ws.apiKey);
    const results = (await Promise.all(
      Array.from({ length: 80 }, () => batcher.admit(hash, 'chat', true, 100)),
    )) as KeyAdmission[];
    let rateLimited = 0;
    let reserved = 0;
    let spent = 0;
    for (const a of results) {
      try {
        a.limit();
      } catch {
        rateLimited++;
        expect(a.reservationId).toBeNull();
        continue;
      }
      try {
        a.quota();
        expect(a.reservationId).toMatch(/^[0-9a-f-]{36}$/);
        reserved++;
      } catch (err) {
        expect((err as AppError).status).toBe(403);
        spent++;
      }
    }
    // 50 within the rate limit; 10 reservations of 100 fill the quota of 1,000.
    expect([rateLimited, reserved, spent]).toEqual([30, 10, 40]);
    const [row] = await ts.server.deps
      .em()
      .execute<{ reserved: string }[]>('select reserved from workspace_token_usage where workspace_id = ?', [
        ws.workspaceId,
      ]);
    expect(Number(row?.reserved)).toBe(1000);
  });

  it('a batch statement that fails admits each of its requests on its own', async () => {
    const ws = await createTestWorkspace(ts);
    const sql = ts.server.deps.db.sql;
    let failed = 0;
    // The real pool, with the batch statement failing (as a lost connection would fail it).
    const faulty: SqlExecutor = {
      execute: <T>(q: string, params?: unknown[]) => {
        if (q.includes('as r(i int, key_hash text, admit boolean)')) {
          failed++;
          return Promise.reject(new Error('connection lost'));
        }
        return sql.execute<T>(q, params);
      },
    };
    const batcher = new AdmissionBatcher(() => faulty, rules({ limit: 30, windowSeconds: WINDOW }));
    const results = (await Promise.all(
      Array.from({ length: 40 }, () => batcher.admit(hashApiKey(ws.apiKey), 'chat', true, 1)),
    )) as KeyAdmission[];
    expect(failed).toBeGreaterThan(0);
    const seen = results.map((a) => hitsOf(a, 30)).sort((a, b) => a - b);
    expect(seen.slice(0, 30)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    expect(seen.slice(30).every((h) => h === 31)).toBe(true);
  });

  it('refuses a revoked key and a suspended workspace in a batch', async () => {
    const revoked = await createTestWorkspace(ts);
    const suspended = await createTestWorkspace(ts);
    const live = await createTestWorkspace(ts);
    const sql = ts.server.deps.em();
    await sql.execute('update api_keys set revoked_at = now() where id = ?', [revoked.keyId]);
    await sql.execute("update workspaces set status = 'suspended' where id = ?", [suspended.workspaceId]);
    const batcher = new AdmissionBatcher(counted().db, rules({ limit: 100, windowSeconds: WINDOW }));
    const results = await Promise.all(
      [revoked, suspended, live, revoked, live].map((w) =>
        batcher.admit(hashApiKey(w.apiKey), 'chat', true, 1),
      ),
    );
    expect(results.map((a) => a?.principal.workspaceId)).toEqual([
      undefined,
      undefined,
      live.workspaceId,
      undefined,
      live.workspaceId,
    ]);
  });
});
