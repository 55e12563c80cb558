/**
 * Child process: the fake OpenAI-compatible upstream, replying with a paced stream of
 * BENCH_TOKENS chunks. Reports its URL to the parent over IPC.
 */
import { startFakeOpenAI } from '@ai-suite/testkit';

const tokens = Number(process.env.BENCH_TOKENS ?? 20);
const paceMs = Number(process.env.BENCH_PACE_MS ?? 2);
const fake = await startFakeOpenAI({
  defaultReply: {
    text: Array.from({ length: tokens }, (_, i) => `tok${i} `),
    paceMs,
    usage: { prompt_tokens: 8, completion_tokens: tokens },
  },
});
// Keep memory flat over thousands of requests.
setInterval(() => fake.reset(), 1000).unref();
process.send?.({ type: 'ready', url: fake.url });
process.on('disconnect', () => {
  void fake.close().then(() => process.exit(0));
});
