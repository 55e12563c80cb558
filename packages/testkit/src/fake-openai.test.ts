import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type FakeClock, type FakeOpenAI, startFakeOpenAI } from './fake-openai.js';

let fake: FakeOpenAI;
beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: 'k' });
});
afterAll(() => fake?.close());
beforeEach(() => fake.reset());

const post = (path: string, body: unknown, key = 'k') =>
  fetch(`${fake.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  });

const frames = (text: string) =>
  text
    .split('\n\n')
    .filter((f) => f.startsWith('data: '))
    .map((f) => f.slice(6));

describe('fake OpenAI upstream wire format', () => {
  it('streams deltas with the role first, usage only when asked, then [DONE]', async () => {
    fake.script({ text: ['a', 'b'], usage: { prompt_tokens: 3, completion_tokens: 2 } });
    const res = await post('/chat/completions', {
      model: 'm',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const f = frames(await res.text());
    expect(f.at(-1)).toBe('[DONE]');
    const chunks = f.slice(0, -1).map((x) => JSON.parse(x));
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks.map((c) => c.choices[0]?.delta?.content).filter(Boolean)).toEqual(['a', 'b']);
    expect(chunks.at(-2).choices[0].finish_reason).toBe('stop');
    expect(chunks.at(-1)).toMatchObject({
      choices: [],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
    });
    expect(fake.requests[0]?.completed).toBe(true);

    fake.script({ text: 'x' });
    const noUsage = frames(
      await (await post('/chat/completions', { model: 'm', stream: true, messages: [] })).text(),
    );
    expect(noUsage.slice(0, -1).some((x) => 'usage' in JSON.parse(x))).toBe(false);
  });

  it('streams several tool calls in fragments, by index', async () => {
    fake.script({
      toolCalls: [
        { id: 'c0', name: 'a', arguments: '{"x":1,"y":2}' },
        { id: 'c1', name: 'b', arguments: '{}' },
      ],
    });
    const f = frames(
      await (await post('/chat/completions', { model: 'm', stream: true, messages: [] })).text(),
    );
    const deltas = f
      .slice(0, -1)
      .map((x) => JSON.parse(x).choices[0]?.delta?.tool_calls?.[0])
      .filter(Boolean);
    const args = (i: number) =>
      deltas
        .filter((d) => d.index === i)
        .map((d) => d.function?.arguments ?? '')
        .join('');
    expect(args(0)).toBe('{"x":1,"y":2}');
    expect(args(1)).toBe('{}');
    expect(deltas.filter((d) => d.id).map((d) => [d.index, d.id, d.function.name])).toEqual([
      [0, 'c0', 'a'],
      [1, 'c1', 'b'],
    ]);
    expect(deltas.filter((d) => d.index === 0).length).toBeGreaterThan(2);
  });

  it('answers scripted errors with an OpenAI error body, and 401 for a wrong key', async () => {
    fake.script({ error: { status: 503, message: 'overloaded', type: 'server_error' } });
    const res = await post('/chat/completions', { model: 'm', messages: [] });
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({
      error: { message: 'overloaded', type: 'server_error', param: null, code: null },
    });
    expect((await post('/chat/completions', { model: 'm', messages: [] }, 'wrong')).status).toBe(401);
  });

  it('embeds deterministically with unit vectors', async () => {
    const r = (await (await post('/embeddings', { model: 'e', input: ['a', 'b', 'a'] })).json()) as {
      data: { index: number; embedding: number[] }[];
      usage: { prompt_tokens: number };
    };
    expect(r.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(r.data[0]?.embedding).toEqual(r.data[2]?.embedding);
    expect(r.data[0]?.embedding).not.toEqual(r.data[1]?.embedding);
    const norm = Math.sqrt((r.data[0]?.embedding ?? []).reduce((s, v) => s + v * v, 0));
    expect(norm).toBeCloseTo(1, 6);
    expect(r.usage.prompt_tokens).toBe(3);
  });

  /** A clock the test moves by hand: sleepers wake only when `advance` passes their time. */
  function manualClock() {
    let t = 0;
    const sleepers: { at: number; wake: () => void }[] = [];
    const clock: FakeClock & { pending(): number; next(): number; advance(to: number): void } = {
      now: () => t,
      sleep: (ms) => new Promise<void>((wake) => sleepers.push({ at: t + ms, wake })),
      pending: () => sleepers.length,
      next: () => Math.min(...sleepers.map((s) => s.at)),
      advance(to) {
        t = to;
        for (const s of sleepers.filter((x) => x.at <= t)) {
          sleepers.splice(sleepers.indexOf(s), 1);
          s.wake();
        }
      },
    };
    return clock;
  }

  it.each([
    // The first chunk's timer fires at 35 instead of 10 (the process waited for a core).
    // 'rate': chunks 2 and 3 (due at 20 and 30) go out at once, chunk 4 at 40: on time.
    // 'gaps': every chunk after it is 10 later than the one before: 45, 55, 65.
    ['rate', 0],
    ['gaps', 25],
  ] as const)('paces with %s: a late timer leaves the last chunk %i ms late', async (schedule, late) => {
    const clock = manualClock();
    const streamed: number[] = [];
    const paced = await startFakeOpenAI({ clock, onStreamed: (r) => streamed.push(r.lateMs ?? -1) });
    try {
      paced.script({ text: ['a', 'b', 'c', 'd'], paceMs: 10, paceSchedule: schedule });
      const body = fetch(`${paced.url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
      }).then((r) => r.text());
      let done = false;
      void body.then(() => {
        done = true;
      });
      const settle = async () => {
        while (!done && clock.pending() === 0) await new Promise((r) => setImmediate(r));
      };
      await settle();
      clock.advance(35);
      for (await settle(); !done; await settle()) clock.advance(clock.next());
      const text = frames(await body)
        .slice(0, -1)
        .map((f) => JSON.parse(f).choices[0]?.delta?.content ?? '')
        .join('');
      expect(text).toBe('abcd');
      expect(paced.requests[0]?.lateMs).toBe(late);
      expect(streamed).toEqual([late]);
    } finally {
      await paced.close();
    }
  });
});
