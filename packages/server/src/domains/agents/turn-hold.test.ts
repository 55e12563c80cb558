import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { estimateTokens } from '../../providers/tokens.js';
import {
  createTestWorkspace,
  creditBalance,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
  type TestWorkspace,
} from '../../test/harness.js';
import { createAgentWithSession, openTurn } from './test-helpers.js';
import { MESSAGES_ENDPOINT, turnHoldGuesses } from './turn-hold.js';

/**
 * An assist turn's credit hold taken by its admission statement (decision 0029): from a
 * session's second turn on, the statement that admits the turn also holds its first model
 * call's credits, exactly what `startGeneration` would hold; a guess that no longer fits goes
 * back without a usage record.
 */
let ts: TestServer & { fake: FakeOpenAI };
let ws: TestWorkspace;

const sql = <T = Record<string, unknown>>(q: string, params: unknown[] = []) =>
  ts.server.deps.em().execute<T[]>(q, params);

beforeAll(async () => {
  ts = await startTestServerWithFakeModel();
  ws = await createTestWorkspace(ts, { creditsUsd: '10' });
});
afterAll(() => ts?.close());

/** The hold a first call sending `chars` characters would take now (`startGeneration`'s). */
function expectedHold(chars: number): number {
  const d = ts.server.deps;
  const model = d.models?.resolve('chat', undefined) as NonNullable<
    ReturnType<NonNullable<typeof d.models>['resolve']>
  >;
  return d.metering.expectedHoldMicros(model, MESSAGES_ENDPOINT, estimateTokens(chars));
}

/** One turn; its run, and the ledger lines of its request (oldest first). */
async function turn(sessionId: string, message: string, reply = 'Fine, thanks.', model?: string) {
  ts.fake.script({ text: reply });
  const events = await (await openTurn(ts, ws.apiKey, sessionId, { message, model })).rest();
  expect(events.at(-1)?.data.type).toBe('run.completed');
  const runId = events[0]?.data.runId as string;
  // `same_xact`: written by the transaction that inserted the run (`now()` is its start).
  const ledger = await sql<{ amount_micros: string; kind: string; same_xact: boolean | string }>(
    `select l.amount_micros, l.kind, l.created_at = r.created_at as same_xact
       from runs r join credit_ledger l on l.ref = r.input->>'requestId'
      where r.id = ? order by l.created_at, l.amount_micros`,
    [runId],
  );
  const records = await sql<{ cost_micros: string; provider_status: string }>(
    'select cost_micros, provider_status from usage_records where run_id = ?',
    [runId],
  );
  const firstDebit = ledger.find((l) => l.kind === 'debit');
  return {
    runId,
    ledger,
    records,
    heldMicros: -Number(firstDebit?.amount_micros),
    // The same transaction: `now()` is the transaction's start, in both rows.
    heldByAdmission: firstDebit !== undefined && String(firstDebit.same_xact).startsWith('t'),
  };
}

describe('the credit hold in the turn admission', () => {
  it('holds from the second turn on, in the admission, what startGeneration would hold', async () => {
    const prompt = 'You answer briefly.';
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Held', prompt });
    const first = await turn(sessionId, 'How are you today?');
    expect(first.heldByAdmission).toBe(false);
    expect(first.records).toHaveLength(1);

    for (const message of ['And tomorrow?', 'What about next week, then?']) {
      const want = expectedHold(prompt.length + message.length);
      const t = await turn(sessionId, message);
      expect(t.heldByAdmission).toBe(true);
      expect(t.heldMicros).toBe(want);
      // Held once (the reply cost less: the settlement is a refund), one record.
      expect(t.ledger.map((l) => l.kind)).toEqual(['debit', 'refund']);
      expect(t.records).toEqual([expect.objectContaining({ provider_status: 'success' })]);
    }
    const holds = await sql('select id from credit_holds where workspace_id = ?', [ws.workspaceId]);
    expect(holds).toEqual([]);
  });

  it('a changed agent is not held by the admission: the turn takes its own hold', async () => {
    const { agentId, sessionId } = await createAgentWithSession(ts, ws.apiKey, {
      name: 'Changed',
      prompt: 'Short.',
    });
    await turn(sessionId, 'First message.');
    const patched = await ts.api(`/managed-agents/agents/${agentId}`, {
      method: 'PATCH',
      key: ws.apiKey,
      json: { prompt: 'A much longer system prompt than before, which the guess does not know.' },
    });
    expect(patched.status).toBe(200);
    const want = expectedHold(
      'A much longer system prompt than before, which the guess does not know.'.length + 'Second.'.length,
    );
    const t = await turn(sessionId, 'Second.');
    expect(t.heldByAdmission).toBe(false);
    expect(t.heldMicros).toBe(want);
    // The next turn knows the new prompt again.
    expect((await turn(sessionId, 'Third.')).heldByAdmission).toBe(true);
  });

  it('a guess that no longer fits the prompt gives the hold back with no record, and the call holds its own', async () => {
    const prompt = 'Tools may change.';
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Stale', prompt });
    await turn(sessionId, 'One.');
    // As when an MCP server's tool list changed: the agent row is the same, the prompt is not.
    const guess = turnHoldGuesses.get(sessionId);
    expect(guess).toBeDefined();
    turnHoldGuesses.set(sessionId, {
      ...(guess as NonNullable<typeof guess>),
      fixedChars: (guess?.fixedChars ?? 0) + 4000,
    });
    const before = await creditBalance(ts, ws.workspaceId);
    const want = expectedHold(prompt.length + 'Two.'.length);
    const t = await turn(sessionId, 'Two.');
    expect(t.heldByAdmission).toBe(true);
    const debits = t.ledger.filter((l) => l.kind === 'debit');
    // The admission's (larger) hold, given back in full, then the call's own.
    expect(debits).toHaveLength(2);
    expect(-Number(debits[1]?.amount_micros)).toBe(want);
    expect(-Number(debits[0]?.amount_micros)).toBeGreaterThan(want);
    expect(t.records).toHaveLength(1);
    const cost = Number(t.records[0]?.cost_micros);
    expect(await creditBalance(ts, ws.workspaceId)).toBe(before - cost);
    const holds = await sql('select id from credit_holds where workspace_id = ?', [ws.workspaceId]);
    expect(holds).toEqual([]);
    // And the guess is right again for the next turn.
    expect((await turn(sessionId, 'Three.')).heldByAdmission).toBe(true);
  });

  it('a model override the guess was not made for takes its own hold', async () => {
    const { sessionId } = await createAgentWithSession(ts, ws.apiKey, { name: 'Override', prompt: 'Hi.' });
    await turn(sessionId, 'One.');
    const model = ts.server.deps.models?.resolve('chat', undefined).id as string;
    expect((await turn(sessionId, 'Two.', 'ok', model)).heldByAdmission).toBe(false);
    // The guess is now for that override.
    expect((await turn(sessionId, 'Three.', 'ok', model)).heldByAdmission).toBe(true);
    expect((await turn(sessionId, 'Four.')).heldByAdmission).toBe(false);
  });
});
