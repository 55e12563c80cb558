import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../http/errors.js';
import { createTestWorkspace, startTestServer, type TestServer } from '../test/harness.js';
import { cycleStart, nextCycleStart } from './cycle.js';
import type { PgMetering } from './service.js';

let ts: TestServer;
let metering: PgMetering;
beforeAll(async () => {
  ts = await startTestServer({
    env: {
      CHAT_MODEL: 'm',
      CHAT_MODEL_INPUT_PRICE_PER_MTOK: '1',
      CHAT_MODEL_OUTPUT_PRICE_PER_MTOK: '2',
      RATE_LIMIT_CHAT: '3',
      // A window far longer than the test, so no window boundary falls between its requests.
      RATE_LIMIT_WINDOW_SECONDS: '100000000',
    },
  });
  metering = ts.server.deps.metering as PgMetering;
});
afterAll(() => ts?.close());

const sql = <T>(q: string, params: unknown[] = []) => ts.server.deps.em().execute<T[]>(q, params);

describe('billing cycles', () => {
  it('starts each month on the anchor day, clamped to short months', () => {
    const anchor = new Date('2026-01-31T10:00:00Z');
    expect(cycleStart(anchor, new Date('2026-01-31T10:00:00Z')).toISOString()).toBe(
      '2026-01-31T10:00:00.000Z',
    );
    expect(cycleStart(anchor, new Date('2026-02-27T00:00:00Z')).toISOString()).toBe(
      '2026-01-31T10:00:00.000Z',
    );
    expect(cycleStart(anchor, new Date('2026-02-28T10:00:00Z')).toISOString()).toBe(
      '2026-02-28T10:00:00.000Z',
    );
    expect(cycleStart(anchor, new Date('2026-03-30T23:00:00Z')).toISOString()).toBe(
      '2026-02-28T10:00:00.000Z',
    );
    expect(cycleStart(anchor, new Date('2026-03-31T10:00:00Z')).toISOString()).toBe(
      '2026-03-31T10:00:00.000Z',
    );
    expect(cycleStart(anchor, new Date('2027-01-05T00:00:00Z')).toISOString()).toBe(
      '2026-12-31T10:00:00.000Z',
    );
    expect(nextCycleStart(anchor, new Date('2026-02-01T00:00:00Z')).toISOString()).toBe(
      '2026-02-28T10:00:00.000Z',
    );
    expect(nextCycleStart(anchor, new Date('2026-12-31T10:00:00Z')).toISOString()).toBe(
      '2027-01-31T10:00:00.000Z',
    );
  });
});

describe('credit debits', () => {
  it('never overdraws under parallel debits: the total taken equals the balance', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '0.001' }); // 1000 micros
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        metering.debit(ws.workspaceId, 150, { reason: 'test', ref: `r${i}` }),
      ),
    );
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(0);
    // 6 debits paid in full, one clamped to the 100 left, the rest found nothing.
    expect(results.filter((r) => !r.short)).toHaveLength(6);
    const ledger = await sql<{ amount_micros: string; balance_after_micros: string }>(
      "select amount_micros, balance_after_micros from credit_ledger where workspace_id = ? and kind = 'debit'",
      [ws.workspaceId],
    );
    expect(ledger).toHaveLength(20);
    expect(ledger.reduce((s, r) => s + Number(r.amount_micros), 0)).toBe(-1000);
    const taken = ledger.map((r) => -Number(r.amount_micros)).filter((n) => n > 0);
    expect(taken.sort((a, b) => a - b)).toEqual([100, 150, 150, 150, 150, 150, 150]);
    expect(Math.min(...ledger.map((r) => Number(r.balance_after_micros)))).toBe(0);
  });

  it('loses no debit under parallel debits when the balance suffices', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '1' });
    const results = await Promise.all(
      Array.from({ length: 25 }, () => metering.debit(ws.workspaceId, 1234, { reason: 'test' })),
    );
    expect(results.every((r) => !r.short)).toBe(true);
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(1_000_000 - 25 * 1234);
  });

  it('answers 402 INSUFFICIENT_CREDITS up front and mid-generation', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '0.0001' }); // 100 micros
    const empty = await createTestWorkspace(ts);
    const model = ts.server.deps.models.resolve('chat');
    const base = { endpoint: '/test', requestId: 'req_t', meter: 'credits' as const, model };
    const err = await metering
      .startGeneration({ ...base, workspaceId: empty.workspaceId })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).toBody()).toEqual({
      error: 'Insufficient credits. Please purchase additional credits to continue.',
      code: 'INSUFFICIENT_CREDITS',
    });
    expect((err as AppError).status).toBe(402);

    const meter = await metering.startGeneration({
      ...base,
      workspaceId: ws.workspaceId,
      apiKeyId: ws.keyId,
    });
    meter.addUsage({ inputTokens: 20, outputTokens: 0, estimated: false });
    // 2 micros per output token: 40 tokens (160 chars) cost 80 + 20 = 100, still covered.
    let due = false;
    for (let i = 0; i < 160; i++) due = meter.addStreamedChars(1) || due;
    await meter.check();
    for (let i = 0; i < 40; i++) meter.addStreamedChars(1);
    await expect(meter.check()).rejects.toMatchObject({ status: 402 });
    const done = await meter.finish('error');
    expect(done).toEqual({ costMicros: 120, short: true });
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(0);
    const [rec] = await sql<Record<string, unknown>>('select * from usage_records where workspace_id = ?', [
      ws.workspaceId,
    ]);
    expect(rec).toMatchObject({ meter: 'credits', provider_status: 'error', model: 'm', endpoint: '/test' });
    expect(Number(rec?.input_tokens)).toBe(20);
    expect(Number(rec?.output_tokens)).toBe(50);
    expect(Number(rec?.cost_micros)).toBe(120);
  });
});

describe('token quota and usage records', () => {
  it('records usage with component lines and updates per-key and cycle totals', async () => {
    const ws = await createTestWorkspace(ts, { monthlyTokenQuota: 1000 });
    const model = ts.server.deps.models.resolve('chat');
    const { costMicros, lines } = metering.price(model, 300, 200);
    expect(costMicros).toBe(700);
    await metering.record({
      workspaceId: ws.workspaceId,
      apiKeyId: ws.keyId,
      requestId: 'req_1',
      endpoint: '/chat',
      model: model.id,
      inputTokens: 300,
      outputTokens: 200,
      costMicros,
      providerStatus: 'success',
      latencyMs: 12,
      componentLines: lines,
      meter: 'tokens',
    });
    const [key] = await sql<Record<string, string>>('select * from api_keys where id = ?', [ws.keyId]);
    expect([key?.request_count, key?.input_tokens, key?.output_tokens, key?.cost_micros].map(Number)).toEqual(
      [1, 300, 200, 700],
    );
    const status = await metering.tokenQuotaStatus(ws.workspaceId);
    expect(status).toMatchObject({ quota: 1000, used: 500 });
    const [rec] = await sql<{ component_lines: unknown }>(
      'select component_lines from usage_records where request_id = ?',
      ['req_1'],
    );
    expect(rec?.component_lines).toEqual([
      { component: 'input_tokens', quantity: 300, unitPriceMicros: 1, costMicros: 300 },
      { component: 'output_tokens', quantity: 200, unitPriceMicros: 2, costMicros: 400 },
    ]);
  });

  it('answers 403 Token limit exceeded once the quota is spent, and resets at the cycle date', async () => {
    const ws = await createTestWorkspace(ts, { monthlyTokenQuota: 100 });
    await metering.assertTokenQuota(ws.workspaceId);
    await metering.record({
      workspaceId: ws.workspaceId,
      requestId: 'req_q',
      endpoint: '/chat',
      model: 'm',
      inputTokens: 60,
      outputTokens: 40,
      costMicros: 0,
      providerStatus: 'success',
      latencyMs: 1,
      meter: 'tokens',
    });
    await expect(metering.assertTokenQuota(ws.workspaceId)).rejects.toMatchObject({
      status: 403,
      message: 'Token limit exceeded',
    });
    // The billing cycle turns over: the anchor's monthly date has just passed.
    await sql(
      "update workspaces set billing_cycle_anchor = now() - interval '1 month' - interval '1 minute' where id = ?",
      [ws.workspaceId],
    );
    await metering.assertTokenQuota(ws.workspaceId);
    expect((await metering.tokenQuotaStatus(ws.workspaceId)).used).toBe(0);
  });
});

describe('rate limits', () => {
  it('allows the configured number per window, then 429 with Retry-After and RateLimit headers, across processes', async () => {
    const ws = await createTestWorkspace(ts);
    const second = await startTestServer({
      db: ts.db,
      env: { RATE_LIMIT_CHAT: '3', RATE_LIMIT_WINDOW_SECONDS: '100000000' },
    });
    try {
      const other = second.server.deps.metering;
      const h1 = await metering.rateLimit(ws.workspaceId, 'chat');
      expect(h1).toMatchObject({ 'RateLimit-Limit': '3', 'RateLimit-Remaining': '2' });
      await other.rateLimit(ws.workspaceId, 'chat');
      const h3 = await metering.rateLimit(ws.workspaceId, 'chat');
      expect(h3['RateLimit-Remaining']).toBe('0');
      const err = (await other.rateLimit(ws.workspaceId, 'chat').catch((e: unknown) => e)) as AppError;
      expect(err).toBeInstanceOf(AppError);
      expect(err.status).toBe(429);
      expect(err.message).toBe('Rate limit exceeded');
      expect(err.headers?.['Retry-After']).toMatch(/^\d+$/);
      expect(Number(err.headers?.['Retry-After'])).toBeGreaterThan(0);
      expect(err.headers?.['RateLimit-Remaining']).toBe('0');
      // Another workspace and another bucket are unaffected.
      const ws2 = await createTestWorkspace(ts);
      await metering.rateLimit(ws2.workspaceId, 'chat');
      await metering.rateLimit(ws.workspaceId, 'agent_message');
    } finally {
      await second.close();
    }
  });

  it('counts parallel requests exactly', async () => {
    const ws = await createTestWorkspace(ts);
    const results = await Promise.allSettled(
      Array.from({ length: 10 }, () => metering.rateLimit(ws.workspaceId, 'chat')),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(3);
  });
});
