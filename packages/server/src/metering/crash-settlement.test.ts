import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCK_FILE } from '../db/embedded.js';
import {
  createServerDatabase,
  type FakeOpenAI,
  fakeOpenAIEnv,
  startFakeOpenAI,
  type TestDatabase,
} from '../test/harness.js';
import { spawnServerProcess } from '../test/spawn.js';

/**
 * kill -9 of a server mid-stream (issue 38, decision 0041): the output already streamed to the
 * client is billed. The server process (`pnpm start`'s entry point) marks the progress of its
 * holds every second at most (a third of `RUN_LEASE_MS` here: 2 s); killed with SIGKILL while
 * an app-chat reply streams, then restarted, its sweep settles the orphaned hold from the last
 * mark: a usage record `aborted` with the streamed output, the rest of the hold refunded. On
 * the PostgreSQL server with DATABASE_URL, otherwise an embedded data directory the restarted
 * process reopens.
 */
const onServer = Boolean(process.env.DATABASE_URL);
const API_KEY = `svc_ai_${'K'.repeat(64)}`;
/**
 * A reply within its hold (the default 512 output tokens: the process has seen no reply), so
 * no top-up marks it: 450 tokens of 4 characters, 20 ms apart (~9 s), killed mid-way.
 */
const REPLY_TOKENS = 450;

let fake: FakeOpenAI;
let db: TestDatabase | undefined;
let dataDir: string;
let child: ChildProcess | undefined;

beforeAll(async () => {
  fake = await startFakeOpenAI({
    defaultReply: () => ({ text: 'abcd'.repeat(REPLY_TOKENS), chunkSize: 4, paceMs: 20 }),
  });
  if (onServer) db = await createServerDatabase(process.env.DATABASE_URL as string);
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-crash-'));
});

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await db?.drop();
  await fake?.close();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

async function startServer(): Promise<{ url: string; proc: ChildProcess }> {
  const proc = spawnServerProcess({
    ...fakeOpenAIEnv(fake),
    CHAT_MODEL_INPUT_PRICE_PER_MTOK: '100',
    CHAT_MODEL_OUTPUT_PRICE_PER_MTOK: '200',
    DATABASE_URL: db?.databaseUrl,
    DATA_DIR: dataDir,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
    INIT_WORKSPACE_NAME: 'Crash',
    INIT_API_KEY: API_KEY,
    INIT_CREDITS_USD: '10',
    RUN_POLL_INTERVAL_MS: '100',
    RUN_LEASE_MS: '2000',
  });
  child = proc;
  let out = '';
  proc.stdout?.on('data', (d) => {
    out += d.toString();
  });
  proc.stderr?.on('data', (d) => {
    out += d.toString();
  });
  await expect
    .poll(() => /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1] ?? (proc.exitCode !== null ? out : undefined), {
      timeout: 240_000, // a server process starting on a shared, busy machine
      interval: 100,
    })
    .toMatch(/^http:\/\//);
  return { url: /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1] as string, proc };
}

/** One statement on the test's database (through the running server's socket when embedded). */
async function query<T>(sql: string, params: unknown[] = []): Promise<T[]> {
  let config: pg.ClientConfig;
  if (db) config = { connectionString: db.databaseUrl };
  else {
    const lock = JSON.parse(fs.readFileSync(path.join(dataDir, LOCK_FILE), 'utf8')) as {
      socketDir: string;
      port: number;
    };
    config = { host: lock.socketDir, port: lock.port, user: 'postgres', database: 'postgres' };
  }
  const c = new pg.Client(config);
  await c.connect();
  try {
    return (await c.query(sql, params)).rows as T[];
  } finally {
    await c.end();
  }
}

describe('kill -9 mid-stream', { timeout: 600_000 }, () => {
  it('bills the output already streamed: the restarted server settles the orphaned hold from its last progress mark', async () => {
    let server = await startServer();
    const headers = { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' };
    const app = (await (
      await fetch(`${server.url}/api/v1/apps`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ name: 'C' }),
      })
    ).json()) as { app: { id: string } };
    const [ws] = await query<{ id: string; b: string }>(
      "select id, credit_balance_micros as b from workspaces where name = 'Crash'",
    );
    const workspaceId = ws?.id as string;
    const before = Number(ws?.b);

    const res = await fetch(`${server.url}/api/v1/apps/${app.app.id}/chat/message/stream`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ message: 'Tell me a long story.', role: 'student' }),
    });
    expect(res.status).toBe(200);
    const requestId = res.headers.get('x-request-id') as string;
    // Count the output the client receives, until the connection breaks.
    let chars = 0;
    let buffered = '';
    const reading = (async () => {
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return;
          buffered += decoder.decode(value, { stream: true });
          const lines = buffered.split('\n');
          buffered = lines.pop() ?? '';
          // Token events may carry several upstream chunks: count characters (4 a token).
          for (const l of lines) {
            if (!l.startsWith('data: ')) continue;
            const ev = JSON.parse(l.slice(6)) as { type: string; content?: string };
            if (ev.type === 'token') chars += ev.content?.length ?? 0;
          }
        }
      } catch {
        // The server is gone.
      }
    })();
    // The hold is marked with what has streamed (at most a second behind).
    await expect
      .poll(
        async () =>
          Number(
            (
              await query<{ o: string }>(
                'select output_tokens as o from credit_holds where workspace_id = $1',
                [workspaceId],
              )
            )[0]?.o ?? 0,
          ),
        { timeout: 60_000, interval: 100 },
      )
      .toBeGreaterThan(100);
    const [marked] = await query<{ o: string; used: string; held: string }>(
      'select output_tokens as o, used_micros as used, held_micros as held from credit_holds where workspace_id = $1',
      [workspaceId],
    );
    const exited = once(server.proc, 'exit');
    server.proc.kill('SIGKILL');
    await exited;
    await reading;
    const received = Math.ceil(chars / 4);
    expect(received).toBeGreaterThan(100);
    expect(received).toBeLessThan(REPLY_TOKENS);

    // Restarted: its sweep settles the hold once its lease (2 s) expired.
    server = await startServer();
    await expect
      .poll(
        async () => (await query('select 1 from credit_holds where workspace_id = $1', [workspaceId])).length,
        { timeout: 120_000, interval: 200 },
      )
      .toBe(0);
    // The sweep writes the usage record in a statement after the one that deletes the hold.
    const records = () =>
      query<{ provider_status: string; output_tokens: string; cost_micros: string }>(
        'select provider_status, output_tokens, cost_micros from usage_records where request_id = $1',
        [requestId],
      );
    await expect.poll(async () => (await records()).length, { timeout: 30_000, interval: 200 }).toBe(1);
    const recs = await records();
    const rec = recs[0] as { provider_status: string; output_tokens: string; cost_micros: string };
    expect(rec.provider_status).toBe('aborted');
    const billed = Number(rec.output_tokens);
    // At least what the last mark seen before the kill said; at most what the server streamed,
    // which the client received less what was on the wire (and its last chunk) when it died.
    expect(billed).toBeGreaterThanOrEqual(Number(marked?.o));
    expect(billed).toBeLessThanOrEqual(received + 50);
    // Streamed after the last mark and not billed: at most a second of output (~50 tokens at
    // this pace; generous for a busy machine).
    expect(received - billed).toBeLessThan(150);
    const cost = Number(rec.cost_micros);
    expect(cost).toBeGreaterThanOrEqual(billed * 200);
    expect(Number(marked?.used)).toBeLessThanOrEqual(cost);
    // Within the hold taken up front (no top-up): the rest of it refunded.
    const [holdDebit] = await query<{ a: string }>(
      "select -amount_micros as a from credit_ledger where ref = $1 and kind = 'debit'",
      [requestId],
    );
    expect(Number(holdDebit?.a)).toBe(Number(marked?.held));
    expect(cost).toBeLessThan(Number(marked?.held));
    // The balance and the ledger: the hold taken, the unused part refunded; net = the record's cost.
    const [after] = await query<{ b: string }>(
      'select credit_balance_micros as b from workspaces where id = $1',
      [workspaceId],
    );
    expect(before - Number(after?.b)).toBe(cost);
    const ledger = await query<{ amount_micros: string; kind: string }>(
      'select amount_micros, kind from credit_ledger where workspace_id = $1 and ref = $2',
      [workspaceId, requestId],
    );
    expect(-ledger.reduce((s, l) => s + Number(l.amount_micros), 0)).toBe(cost);
    expect(ledger.map((l) => l.kind).sort()).toContain('refund');

    const exited2 = once(server.proc, 'exit');
    server.proc.kill('SIGTERM');
    await exited2;
  });
});
