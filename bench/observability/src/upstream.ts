/** Child process: the fake OpenAI-compatible upstream (a paced stream of BENCH_TOKENS chunks, with usage). */
import { startFakeOpenAI } from '@ai-suite/testkit';

const tokens = Number(process.env.BENCH_TOKENS ?? 20);
const fake = await startFakeOpenAI({
  defaultReply: {
    text: Array.from({ length: tokens }, (_, i) => `tok${i} `),
    paceMs: Number(process.env.BENCH_PACE_MS ?? 2),
    usage: { prompt_tokens: 8, completion_tokens: tokens },
  },
});
setInterval(() => fake.reset(), 1000).unref();
process.send?.({ type: 'ready', url: fake.url });
process.on('disconnect', () => {
  void fake.close().then(() => process.exit(0));
});
