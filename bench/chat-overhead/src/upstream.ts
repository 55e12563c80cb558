/**
 * Child process: the fake OpenAI-compatible upstream, replying with a paced stream of
 * BENCH_TOKENS chunks. Reports its URL to the parent over IPC.
 *
 * `BENCH_PACE_SCHEDULE`: `gaps` (default) waits `BENCH_PACE_MS` after each chunk written;
 * `rate` sends chunk i `BENCH_PACE_MS × (i + 1)` after the content began, so the fake's own
 * late timers (it shares the host's cores with what is measured) do not pile up. Asked
 * `{ type: 'late' }`, it answers how late its replies ended since the last ask (and forgets them).
 */
import { startFakeOpenAI } from '@ai-suite/testkit';

const tokens = Number(process.env.BENCH_TOKENS ?? 20);
const paceMs = Number(process.env.BENCH_PACE_MS ?? 2);
const paceSchedule = process.env.BENCH_PACE_SCHEDULE === 'rate' ? 'rate' : 'gaps';
let late: number[] = [];
const fake = await startFakeOpenAI({
  defaultReply: {
    text: Array.from({ length: tokens }, (_, i) => `tok${i} `),
    paceMs,
    paceSchedule,
    usage: { prompt_tokens: 8, completion_tokens: tokens },
  },
  onStreamed: (rec) => {
    if (rec.lateMs !== undefined) late.push(rec.lateMs);
  },
});
// Keep memory flat over thousands of requests.
setInterval(() => fake.reset(), 1000).unref();
process.on('message', (m: { type?: string }) => {
  if (m.type !== 'late') return;
  const s = late.sort((a, b) => a - b);
  late = [];
  const at = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? Number.NaN;
  process.send?.({ type: 'late', n: s.length, p50: at(0.5), p99: at(0.99) });
});
process.send?.({ type: 'ready', url: fake.url });
process.on('disconnect', () => {
  void fake.close().then(() => process.exit(0));
});
