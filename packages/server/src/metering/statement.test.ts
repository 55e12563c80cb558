import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestWorkspace, startTestServer, type TestServer } from '../test/harness.js';
import type { GenerationMeter } from './generation-meter.js';
import type { PgMetering } from './service.js';

/**
 * The hold and the settlement as parts of a caller's statement (app chat: the hold in its
 * admission, the settlement with the turn's memory), on whichever database the run uses; and
 * the settlement as one UPDATE of the balance row, after the hold's row (decision 0031): no
 * `SELECT … FOR UPDATE` of the workspace, so a settlement neither waits for the `FOR KEY SHARE`
 * every insert referencing the workspace takes nor deadlocks with another settlement.
 */
let ts: TestServer;
let metering: PgMetering;
beforeAll(async () => {
  ts = await startTestServer({
    env: {
      CHAT_MODEL: 'm',
      CHAT_MODEL_INPUT_PRICE_PER_MTOK: '1',
      CHAT_MODEL_OUTPUT_PRICE_PER_MTOK: '2',
      METERING_CREDIT_CHECK_TOKENS: '10',
      METERING_DEFAULT_OUTPUT_TOKENS: '10',
    },
  });
  // The plain pool's metering, as app chat uses it (usage records batched).
  metering = ts.server.deps.poolMetering as PgMetering;
});
afterAll(() => ts?.close());

const sql = <T>(q: string, params: unknown[] = []) => ts.server.deps.em().execute<T[]>(q, params);
const pool = () => ts.server.deps.db.sql;

const holdsOf = (workspaceId: string) =>
  sql<{ held_micros: string; used_micros: string; input_tokens: string; record: unknown }>(
    'select held_micros, used_micros, input_tokens, record from credit_holds where workspace_id = ?',
    [workspaceId],
  );
const ledgerOf = async (workspaceId: string) =>
  (
    await sql<{ amount_micros: string; kind: string; ref: string }>(
      "select amount_micros, kind, ref from credit_ledger where workspace_id = ? and kind <> 'grant' order by created_at, kind",
      [workspaceId],
    )
  ).map((l) => [l.kind, Number(l.amount_micros), l.ref]);
const recordsOf = (workspaceId: string) =>
  sql<{ provider_status: string; cost_micros: string; api_key_id: string | null; request_id: string }>(
    'select provider_status, cost_micros, api_key_id, request_id from usage_records where workspace_id = ?',
    [workspaceId],
  );

/** Runs a hold in a statement of its own, as a caller's admission would. */
async function holdIn(workspaceId: string, chars: number, extraChars: number, requestId: string) {
  const model = ts.server.deps.models.resolve('chat');
  const hold = metering.holdInStatement(
    { endpoint: '/test', requestId, meter: 'credits', model },
    { inputChars: chars },
  );
  const rows = await pool().execute<{ held: string | null; tried: boolean | string }[]>(
    `with hold_src as (
       select ?::uuid as workspace_id, ?::bigint as extra_chars,
              jsonb_build_object('workspaceId', ?::text, 'apiKeyId', null, 'sessionId', 's-1') as usage_patch
     ), ${hold.ctes}
     select (select held from hold_upd) as held, exists (select 1 from hold_amt) as tried`,
    [workspaceId, extraChars, workspaceId, ...hold.params],
  );
  return { hold, model, held: rows[0]?.held === null ? null : Number(rows[0]?.held) };
}

describe('a hold inside the caller statement', () => {
  it('holds what startGeneration holds, from the characters the statement adds; refused: nothing written', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '0.001' }); // 1000 micros
    // 300 + 101 characters: ⌈401 / 4⌉ = 101 input tokens (1 µ$ each), plus the expected
    // reply of 10 tokens at 2 µ$: 121.
    const { hold, model, held } = await holdIn(ws.workspaceId, 300, 101, 'req_h1');
    expect(held).toBe(121);
    expect(held).toBe(metering.expectedHoldMicros(model, '/test', 101));
    const [row] = await holdsOf(ws.workspaceId);
    expect(row).toMatchObject({ held_micros: expect.anything(), used_micros: expect.anything() });
    expect([Number(row?.held_micros), Number(row?.used_micros), Number(row?.input_tokens)]).toEqual([
      121, 101, 101,
    ]);
    // The record a sweep would write: the usage completed by the statement.
    expect(row?.record).toMatchObject({
      model: 'm',
      usage: {
        workspaceId: ws.workspaceId,
        apiKeyId: null,
        sessionId: 's-1',
        requestId: 'req_h1',
        endpoint: '/test',
      },
    });
    expect(await ledgerOf(ws.workspaceId)).toEqual([['debit', -121, 'req_h1']]);

    // The adopted meter settles like any other: refund of the unused part, one record.
    const meter = hold.adopt(
      { workspaceId: ws.workspaceId, endpoint: '/test', requestId: 'req_h1', meter: 'credits', model },
      held as number,
      101,
    );
    meter.addUsage({ inputTokens: 101, outputTokens: 4, estimated: false });
    expect(await meter.finish('success')).toEqual({ costMicros: 109, short: false });
    expect(await holdsOf(ws.workspaceId)).toEqual([]);
    expect(await ts.server.deps.metering.balanceMicros(ws.workspaceId)).toBe(1000 - 109);

    // More than the balance: nothing held, no ledger line, no hold row.
    const poor = await createTestWorkspace(ts, { creditsUsd: '0.0001' }); // 100 micros
    expect((await holdIn(poor.workspaceId, 300, 101, 'req_h2')).held).toBeNull();
    expect(await holdsOf(poor.workspaceId)).toEqual([]);
    expect(await ledgerOf(poor.workspaceId)).toEqual([]);
    expect(await ts.server.deps.metering.balanceMicros(poor.workspaceId)).toBe(100);
  });
});

describe('a settlement inside the caller statement', () => {
  it('commits with the caller writes or not at all; after a failure the meter settles on its own, once', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '0.001' });
    const model = ts.server.deps.models.resolve('chat');
    const input = {
      workspaceId: ws.workspaceId,
      apiKeyId: ws.keyId,
      endpoint: '/test',
      requestId: 'req_s1',
      meter: 'credits' as const,
      model,
    };
    const meter = await metering.startGeneration(input, { inputTokens: 100 });
    // The prompt plus the expected reply (twice the longest reply seen so far: 1 or 2 were).
    expect(meter.heldMicros).toBe(metering.expectedHoldMicros(model, '/test', 100));
    const held = meter.heldMicros;
    expect(held).toBeGreaterThan(110);
    meter.addUsage({ inputTokens: 100, outputTokens: 5, estimated: false });

    // The caller's part fails after the settlement's CTEs ran (it reads their result).
    const failing = meter.settlementInStatement('success');
    if (!failing) throw new Error('expected a settlement');
    await expect(
      pool().execute(
        `with ${failing.ctes}, boom as (select 1 / (delta - delta) as x from stl_amt)
         select ${failing.columns}, (select x from boom) as x`,
        failing.params,
      ),
    ).rejects.toThrow();
    // Neither: the hold is still there, no refund, no record.
    expect(await holdsOf(ws.workspaceId)).toHaveLength(1);
    expect(await ledgerOf(ws.workspaceId)).toEqual([['debit', -held, 'req_s1']]);
    expect(await recordsOf(ws.workspaceId)).toEqual([]);
    // Finished meanwhile: no second settlement can be built.
    expect(meter.settlementInStatement('success')).toBeUndefined();
    failing.failed();

    // Committed with the caller's write: the refund, the record and the key's totals.
    const stl = meter.settlementInStatement('success');
    if (!stl) throw new Error('expected a settlement after failed()');
    const rows = await pool().execute<{ stl_delta: unknown; stl_change: unknown; n: number }[]>(
      `with ${stl.ctes}, caller as (select 1 as n from stl_done) select ${stl.columns}, (select n from caller) as n`,
      stl.params,
    );
    expect(stl.committed(rows[0] as { stl_delta: unknown; stl_change: unknown })).toEqual({
      costMicros: 110,
      short: false,
    });
    expect(await holdsOf(ws.workspaceId)).toEqual([]);
    expect(await ledgerOf(ws.workspaceId)).toEqual([
      ['debit', -held, 'req_s1'],
      ['refund', held - 110, 'req_s1'],
    ]);
    const recs = await recordsOf(ws.workspaceId);
    expect(recs.map((r) => [r.provider_status, Number(r.cost_micros), r.api_key_id, r.request_id])).toEqual([
      ['success', 110, ws.keyId, 'req_s1'],
    ]);
    const [key] = await sql<{ request_count: string; cost_micros: string }>(
      'select request_count, cost_micros from api_keys where id = ?',
      [ws.keyId],
    );
    expect([Number(key?.request_count), Number(key?.cost_micros)]).toEqual([1, 110]);
    // Finished: `finish` is a no-op.
    expect(await meter.finish('success')).toEqual({ costMicros: 0, short: false });
    expect(await recordsOf(ws.workspaceId)).toHaveLength(1);
  });

  it('a hold settled meanwhile (by the sweep) is neither settled nor recorded again', async () => {
    const ws = await createTestWorkspace(ts, { creditsUsd: '0.001' });
    const model = ts.server.deps.models.resolve('chat');
    const meter = await metering.startGeneration(
      { workspaceId: ws.workspaceId, endpoint: '/test', requestId: 'req_s2', meter: 'credits', model },
      { inputTokens: 100 },
    );
    const held = meter.heldMicros;
    await sql('delete from credit_holds where workspace_id = ?', [ws.workspaceId]);
    const stl = meter.settlementInStatement('success');
    if (!stl) throw new Error('expected a settlement');
    const rows = await pool().execute<{ stl_delta: unknown; stl_change: unknown }[]>(
      `with ${stl.ctes} select ${stl.columns}`,
      stl.params,
    );
    expect(stl.committed(rows[0] as { stl_delta: unknown; stl_change: unknown })).toEqual({
      costMicros: 100,
      short: false,
    });
    expect(await ledgerOf(ws.workspaceId)).toEqual([['debit', -held, 'req_s2']]);
    expect(await recordsOf(ws.workspaceId)).toEqual([]);
  });
});

const start = (workspaceId: string, requestId: string, apiKeyId?: string): Promise<GenerationMeter> =>
  metering.startGeneration(
    {
      workspaceId,
      apiKeyId,
      endpoint: '/test',
      requestId,
      meter: 'credits',
      model: ts.server.deps.models.resolve('chat'),
    },
    { inputTokens: 10, maxTokens: 10 },
  );

describe('settlements and the balance row', { timeout: 120_000 }, () => {
  it('a burst of 300 settlements (refunds and debits beyond the hold, alone or in a caller statement) charges each request its cost', async () => {
    const credits = 1_000_000;
    const ws = await createTestWorkspace(ts, { creditsUsd: (credits / 1e6).toFixed(6) });
    const costs = new Map<string, number>();
    const one = async (i: number) => {
      const requestId = `burst_${i}`;
      const meter = await start(ws.workspaceId, requestId, ws.keyId);
      // Held 10 + 2 × (at most 10) µ$; replies of 0–40 tokens: refunds, exact, and debits beyond.
      const out = (i * 7) % 41;
      meter.addUsage({ inputTokens: 10, outputTokens: out, estimated: false });
      let cost: number;
      if (i % 2 === 0) {
        cost = (await meter.finish('success')).costMicros;
      } else {
        const stl = meter.settlementInStatement('success');
        if (!stl) throw new Error('expected a settlement');
        const rows = await ts.server.deps.db.sql.execute<{ stl_delta: unknown; stl_change: unknown }[]>(
          `with ${stl.ctes} select ${stl.columns}`,
          stl.params,
        );
        cost = stl.committed(rows[0] ?? { stl_delta: null, stl_change: null }).costMicros;
      }
      expect(cost).toBe(10 + 2 * out);
      costs.set(requestId, cost);
    };
    const results = await Promise.allSettled(Array.from({ length: 300 }, (_, i) => one(i)));
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);

    const spent = [...costs.values()].reduce((s, c) => s + c, 0);
    expect(await metering.balanceMicros(ws.workspaceId)).toBe(credits - spent);
    expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toHaveLength(0);
    const ledger = await sql<{ amount_micros: string; kind: string; ref: string }>(
      "select amount_micros, kind, ref from credit_ledger where workspace_id = ? and kind <> 'grant'",
      [ws.workspaceId],
    );
    // Request by request: its hold and its refund or debit beyond the hold sum to its cost.
    const perRequest = new Map<string, number>();
    for (const l of ledger) perRequest.set(l.ref, (perRequest.get(l.ref) ?? 0) - Number(l.amount_micros));
    expect(perRequest).toEqual(costs);
    // Some settled by a refund (hold + refund), some by a debit beyond the hold (two debits).
    const shapes = new Map<string, string[]>();
    for (const l of ledger) shapes.set(l.ref, [...(shapes.get(l.ref) ?? []), l.kind].sort());
    const seen = new Set([...shapes.values()].map((k) => k.join(',')));
    expect(seen.has('debit,refund')).toBe(true);
    expect(seen.has('debit,debit')).toBe(true);
    const [key] = await sql<{ request_count: string; cost_micros: string }>(
      'select request_count, cost_micros from api_keys where id = ?',
      [ws.keyId],
    );
    // The caller-statement half records its usage with the key's totals in the statement.
    expect(Number(key?.request_count)).toBeGreaterThanOrEqual(150);
  });

  it.skipIf(!process.env.DATABASE_URL)(
    "settlements do not wait for a transaction that holds the workspace row FOR KEY SHARE (an insert's foreign-key check)",
    async () => {
      const ws = await createTestWorkspace(ts, { creditsUsd: '0.001' }); // 1000 micros
      const refunding = await start(ws.workspaceId, 'ks_refund');
      refunding.addUsage({ inputTokens: 10, outputTokens: 1, estimated: false }); // 12, under the hold
      const debiting = await start(ws.workspaceId, 'ks_debit');
      debiting.addUsage({ inputTokens: 10, outputTokens: 20, estimated: false }); // 50, over it
      const dead = await start(ws.workspaceId, 'ks_dead');
      metering.leases.delete(dead.holdId as string);
      await sql(`update credit_holds set expires_at = now() - interval '1 second' where id = ?`, [
        dead.holdId,
      ]);

      const holder = new pg.Client({ connectionString: ts.db.databaseUrl });
      await holder.connect();
      try {
        // What every insert into a table referencing the workspace takes until it commits.
        await holder.query('begin');
        await holder.query('select 1 from workspaces where id = $1 for key share', [ws.workspaceId]);
        const settled = (p: Promise<unknown>) =>
          Promise.race([
            p.then(() => 'settled'),
            new Promise((resolve) => setTimeout(() => resolve('waiting'), 5000)),
          ]);
        expect(await settled(refunding.finish('success'))).toBe('settled');
        expect(await settled(debiting.finish('success'))).toBe('settled');
        // The sweep's settlement of a dead process's hold: the same form.
        expect(await settled(metering.settleExpired())).toBe('settled');
        await holder.query('commit');
      } finally {
        await holder.end();
      }
      // 1000 − 12 − 50, and the dead hold's input (10) recorded as used.
      expect(await metering.balanceMicros(ws.workspaceId)).toBe(1000 - 12 - 50 - 10);
      expect(await sql('select 1 from credit_holds where workspace_id = ?', [ws.workspaceId])).toHaveLength(
        0,
      );
    },
  );
});
