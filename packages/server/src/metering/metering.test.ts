import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../errors/index.js';
import { createTestWorkspace, startTestServer, type TestServer } from '../test/harness.js';
import { cycleStart, nextCycleStart } from './cycle.js';
import { estimatorKey } from './estimator.js';
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
      // A credit hold chunk of 10 output tokens = 20 micros; a reply expected to be 10 tokens
      // (until the estimator has seen 3 replies of the model).
      METERING_CREDIT_CHECK_TOKENS: '10',
      METERING_DEFAULT_OUTPUT_TOKENS: '10',
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

  it('answers 402 INSUFFICIENT_CREDITS up front and when a mid-stream top-up fails', async () => {
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
    await expect(
      metering.startGeneration({
        ...base,
        workspaceId: empty.workspaceId,
        insufficientVariant: 'appsChat',
      }),
    ).rejects.toMatchObject({ status: 402, message: 'Insufficient credits' });

    // Hold up front: 20 input tokens (20 micros) + one chunk of 10 output tokens (20 micros).
    const meter = await metering.startGeneration(
      { ...base, workspaceId: ws.workspaceId, apiKeyId: ws.keyId },
      { inputTokens: 20 },
    );
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(60);
    meter.addUsage({ inputTokens: 20, outputTokens: 0, estimated: false });
    const stream = async (tokens: number) => {
      let due = false;
      for (let i = 0; i < tokens * 4; i++) due = meter.addStreamedChars(1) || due;
      expect(due).toBe(true);
      await meter.check();
    };
    await stream(10); // cost 40, hold topped up to 60
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(40);
    await stream(20); // cost 80, hold topped up to 100
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(0);
    // The balance is spent. Within its hold (cost 100 = hold 100) the reply goes on without a
    // top-up (decision 0041); past it, at most one hold (40) below zero.
    await stream(10); // cost 100, hold 100: the free balance cannot top it up, it goes on
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(0);
    await stream(10); // cost 120, past the hold: topped up into the overdraft, hold 140
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(-40);
    await stream(10); // cost 140 = hold 140: within what was held, it goes on
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(-40);
    // One token more outgrows the hold: a check is due at once, and the overdraft is spent.
    let due = false;
    for (let i = 0; i < 4; i++) due = meter.addStreamedChars(1) || due;
    expect(due).toBe(true);
    await expect(meter.check()).rejects.toMatchObject({ status: 402, code: 'INSUFFICIENT_CREDITS' });
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(-40);
    // The caller ends the stream; what it streamed meanwhile (1 more token) exceeds the hold
    // and the overdraft: not taken, reported short.
    for (let i = 0; i < 4; i++) meter.addStreamedChars(1);
    const done = await meter.finish('error');
    expect(done).toEqual({ costMicros: 144, short: true });
    expect(await meter.finish('error')).toEqual({ costMicros: 0, short: false });
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(-40);
    const ledger = await sql<{ amount_micros: string; kind: string }>(
      "select amount_micros, kind from credit_ledger where workspace_id = ? and kind <> 'grant' order by created_at, balance_after_micros desc",
      [ws.workspaceId],
    );
    expect(ledger.map((l) => [l.kind, Number(l.amount_micros)])).toEqual([
      ['debit', -40],
      ['debit', -20],
      ['debit', -40],
      ['debit', -40],
    ]);
    expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toHaveLength(0);
    const [rec] = await sql<Record<string, unknown>>('select * from usage_records where workspace_id = ?', [
      ws.workspaceId,
    ]);
    expect(rec).toMatchObject({ meter: 'credits', provider_status: 'error', model: 'm', endpoint: '/test' });
    expect(Number(rec?.input_tokens)).toBe(20);
    expect(Number(rec?.output_tokens)).toBe(62);
    expect(Number(rec?.cost_micros)).toBe(144);
  });

  it('refunds the unused part of the hold on a short generation, once', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '0.001' }); // 1000 micros
    const model = ts.server.deps.models.resolve('chat');
    const meter = await metering.startGeneration(
      { workspaceId: ws.workspaceId, endpoint: '/test', requestId: 'req_r', meter: 'credits', model },
      { inputTokens: 100 },
    );
    expect(meter.heldMicros).toBe(120);
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(880);
    meter.addUsage({ inputTokens: 100, outputTokens: 5, estimated: false });
    expect(await meter.finish('success')).toEqual({ costMicros: 110, short: false });
    expect(await meter.finish('success')).toEqual({ costMicros: 0, short: false });
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(890);
    const ledger = await sql<{
      amount_micros: string;
      balance_after_micros: string;
      kind: string;
      ref: string;
    }>(
      "select amount_micros, balance_after_micros, kind, ref from credit_ledger where workspace_id = ? and kind <> 'grant' order by created_at, kind",
      [ws.workspaceId],
    );
    expect(
      ledger.map((l) => [l.kind, Number(l.amount_micros), Number(l.balance_after_micros), l.ref]),
    ).toEqual([
      ['debit', -120, 880, 'req_r'],
      ['refund', 10, 890, 'req_r'],
    ]);
  });

  it('admits only what the balance can hold under 20 concurrent generations; overdraws at most one hold', async () => {
    // Each generation: 10 input tokens + 25 output tokens = 60 micros; 180 micros cover 3.
    // The up-front hold is 10 + the expected reply (10 tokens, 20 micros) = 30 micros: an
    // underestimate, so 6 are admitted and run out at their top-ups, one hold below zero at most.
    const ws = await createTestWorkspace(ts, { creditsUsd: '0.00018' });
    const model = ts.server.deps.models.resolve('chat');
    const started = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) =>
        metering.startGeneration(
          { workspaceId: ws.workspaceId, endpoint: '/test', requestId: `gen_${i}`, meter: 'credits', model },
          { inputTokens: 10 },
        ),
      ),
    );
    const meters = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const refused = started.flatMap((r) => (r.status === 'rejected' ? [r.reason as AppError] : []));
    expect(meters).toHaveLength(6);
    expect(refused.every((e) => e.status === 402 && e.code === 'INSUFFICIENT_CREDITS')).toBe(true);
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(0);

    // The admitted ones stream concurrently, one token at a time, checking when due.
    const outcomes = await Promise.all(
      meters.map(async (meter) => {
        meter.addUsage({ inputTokens: 10, outputTokens: 0, estimated: false });
        let status: 'success' | 'error' = 'success';
        try {
          for (let t = 0; t < 25; t++) if (meter.addStreamedChars(4)) await meter.check();
        } catch (e) {
          expect(e).toMatchObject({ status: 402 });
          status = 'error';
        } finally {
          await meter.finish(status);
        }
        return status;
      }),
    );
    const balance = await metering.balanceMicros(ws.workspaceId);
    expect(balance).toBeGreaterThanOrEqual(-30);
    const recs = await sql<{ request_id: string; cost_micros: string; provider_status: string }>(
      'select request_id, cost_micros, provider_status from usage_records where workspace_id = ?',
      [ws.workspaceId],
    );
    expect(recs).toHaveLength(6);
    expect(recs.filter((r) => r.provider_status === 'success')).toHaveLength(
      outcomes.filter((o) => o === 'success').length,
    );
    const used = recs.reduce((s, r) => s + Number(r.cost_micros), 0);
    // No unpaid work beyond one request's cost.
    expect(used).toBeLessThanOrEqual(180 + 60);
    const ledger = await sql<{
      amount_micros: string;
      balance_after_micros: string;
      kind: string;
      ref: string;
    }>(
      "select amount_micros, balance_after_micros, kind, ref from credit_ledger where workspace_id = ? and kind <> 'grant'",
      [ws.workspaceId],
    );
    const debits = ledger.filter((l) => l.kind === 'debit').reduce((s, l) => s - Number(l.amount_micros), 0);
    const refunds = ledger
      .filter((l) => l.kind === 'refund')
      .reduce((s, l) => s + Number(l.amount_micros), 0);
    expect(debits - refunds).toBe(180 - balance);
    expect(Math.min(...ledger.map((l) => Number(l.balance_after_micros)))).toBeGreaterThanOrEqual(-30);
    // Per generation, its ledger lines net to its recorded cost unless it ran short.
    for (const r of recs) {
      const net = ledger
        .filter((l) => l.ref === r.request_id)
        .reduce((s, l) => s - Number(l.amount_micros), 0);
      expect(net).toBeLessThanOrEqual(Number(r.cost_micros));
    }
    // Refused generations left no ledger line and no record; no hold is left.
    expect(new Set(ledger.map((l) => l.ref)).size).toBe(6);
    expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toHaveLength(0);
  });

  it('sizes the hold to the learned reply length: a burst admits what the balance pays for, all complete', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '0.00018' });
    const model = ts.server.deps.models.resolve('chat');
    // Replies of this model have been 25 tokens long; maxTokens caps the estimate.
    const key = estimatorKey(model.id, '/test');
    for (let i = 0; i < 10; i++) metering.estimator.observe(key, 25);
    expect(metering.estimator.expect(key)).toBe(25);
    expect(metering.estimator.expect(key, 7)).toBe(7);
    expect(metering.estimator.expect(estimatorKey(model.id, '/other'))).toBe(10);
    const started = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) =>
        metering.startGeneration(
          { workspaceId: ws.workspaceId, endpoint: '/test', requestId: `mt_${i}`, meter: 'credits', model },
          { inputTokens: 10, maxTokens: 1000 },
        ),
      ),
    );
    const meters = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    expect(meters).toHaveLength(3);
    for (const m of meters) expect(m.heldMicros).toBe(60);
    await Promise.all(
      meters.map(async (meter) => {
        for (let t = 0; t < 25; t++) if (meter.addStreamedChars(4)) await meter.check();
        meter.addUsage({ inputTokens: 10, outputTokens: 25, estimated: false });
        expect(await meter.finish('success')).toEqual({ costMicros: 60, short: false });
      }),
    );
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(0);
  });

  it('records the estimated input of a call that ended before reporting usage', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '0.001' });
    const model = ts.server.deps.models.resolve('chat');
    const meter = await metering.startGeneration(
      { workspaceId: ws.workspaceId, endpoint: '/test', requestId: 'early', meter: 'credits', model },
      { inputTokens: 50 },
    );
    meter.addStreamedChars(12);
    expect(await meter.finish('error')).toEqual({ costMicros: 56, short: false });
    const [rec] = await sql<{ input_tokens: string; output_tokens: string }>(
      'select input_tokens, output_tokens from usage_records where workspace_id = ?',
      [ws.workspaceId],
    );
    expect([Number(rec?.input_tokens), Number(rec?.output_tokens)]).toEqual([50, 3]);
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(1000 - 56);
  });

  it('settles the hold of a dead process once its lease expires: refund of the unused part, in the ledger', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '0.001' });
    const model = ts.server.deps.models.resolve('chat');
    const meter = await metering.startGeneration(
      {
        workspaceId: ws.workspaceId,
        apiKeyId: ws.keyId,
        endpoint: '/test',
        requestId: 'crashed',
        meter: 'credits',
        model,
      },
      { inputTokens: 30, maxTokens: 100 },
    );
    const held = 30 + 2 * metering.estimator.expect(estimatorKey(model.id, '/test'), 100);
    expect(meter.heldMicros).toBe(held);
    for (let t = 0; t < 5; t++) if (meter.addStreamedChars(4)) await meter.check(); // within the hold
    // Its progress marked (the heartbeat's, every second): the input (30) and 5 tokens (10).
    await metering.leases.beat();
    const [mark] = await sql<{ used_micros: string; output_tokens: string }>(
      'select used_micros, output_tokens from credit_holds where id = ?',
      [meter.holdId],
    );
    expect([Number(mark?.used_micros), Number(mark?.output_tokens)]).toEqual([40, 5]);
    // The process "dies": no more heartbeat (one in flight is waited for), the lease runs out.
    metering.leases.delete(meter.holdId as string);
    await metering.leases.beat();
    await sql(`update credit_holds set expires_at = now() - interval '1 second' where id = ?`, [
      meter.holdId,
    ]);
    // This sweep or the server's own periodic one settles it: either way, once.
    await metering.settleExpired();
    await expect
      .poll(async () => (await sql('select 1 from credit_holds where id = ?', [meter.holdId])).length)
      .toBe(0);
    // Used at the last mark of the hold: the input (30) and the 5 tokens streamed (10); the
    // rest comes back.
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(1000 - 40);
    const ledger = await sql<{ amount_micros: string; kind: string; ref: string }>(
      "select amount_micros, kind, ref from credit_ledger where workspace_id = ? and kind <> 'grant' order by created_at, kind",
      [ws.workspaceId],
    );
    expect(ledger.map((l) => [l.kind, Number(l.amount_micros), l.ref])).toEqual([
      ['debit', -held, 'crashed'],
      ['refund', held - 40, 'crashed'],
    ]);
    const [rec] = await sql<Record<string, unknown>>('select * from usage_records where workspace_id = ?', [
      ws.workspaceId,
    ]);
    expect(rec).toMatchObject({ provider_status: 'aborted', request_id: 'crashed', meter: 'credits' });
    expect(Number(rec?.input_tokens)).toBe(30);
    expect(Number(rec?.output_tokens)).toBe(5);
    expect(Number(rec?.cost_micros)).toBe(40);
    // A late finish of the "dead" meter settles and records nothing more.
    await meter.finish('aborted');
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(1000 - 40);
    expect(await sql('select 1 from usage_records where workspace_id = ?', [ws.workspaceId])).toHaveLength(1);
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

describe('batched usage records (the /chat hot path)', () => {
  it('writes concurrent records in batches with exact totals; a bad record fails alone; close writes what is pending', async () => {
    const ws = await createTestWorkspace(ts, { monthlyTokenQuota: 1_000_000 });
    const model = ts.server.deps.models.resolve('chat');
    const batched = metering.using(ts.server.deps.db.sql, { batchUsage: true });
    const rec = (i: number, workspaceId = ws.workspaceId) => ({
      workspaceId,
      apiKeyId: workspaceId === ws.workspaceId ? ws.keyId : null,
      requestId: `req_batch_${i}`,
      endpoint: '/chat',
      model: model.id,
      inputTokens: 3,
      outputTokens: 2,
      costMicros: 7,
      providerStatus: 'success',
      latencyMs: 1,
      meter: 'tokens' as const,
    });
    const results = await Promise.allSettled([
      ...Array.from({ length: 40 }, (_, i) => batched.record(rec(i))),
      // A workspace that does not exist: its record fails (foreign key), the others are kept.
      batched.record(rec(99, '00000000-0000-4000-8000-000000000000')),
    ]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(40);
    expect(results.at(-1)?.status).toBe('rejected');
    const [count] = await sql<{ n: string }>(
      "select count(*) as n from usage_records where request_id like 'req_batch_%'",
    );
    expect(Number(count?.n)).toBe(40);
    const [key] = await sql<Record<string, string>>('select * from api_keys where id = ?', [ws.keyId]);
    expect([key?.request_count, key?.input_tokens, key?.output_tokens, key?.cost_micros].map(Number)).toEqual(
      [40, 120, 80, 280],
    );
    expect((await metering.tokenQuotaStatus(ws.workspaceId)).used).toBe(200);

    // Pending records are written by close(), not dropped.
    const late = batched.record({ ...rec(41), requestId: 'req_batch_late' });
    await batched.close();
    await late;
    const [lateRow] = await sql<{ n: string }>(
      "select count(*) as n from usage_records where request_id = 'req_batch_late'",
    );
    expect(Number(lateRow?.n)).toBe(1);
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
