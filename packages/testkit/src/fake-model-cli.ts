/**
 * `pnpm fake-model`: the fake OpenAI-compatible model on a fixed port, in demo mode, to try
 * the service and the examples without a provider. Prints the variables that point the
 * server at it. FAKE_MODEL_PORT picks the port (default 4010; 0 = any free one).
 */
import { demoReply } from './fake-demo.js';
import { startFakeOpenAI } from './fake-openai.js';

const port = Number(process.env.FAKE_MODEL_PORT ?? 4010);
const fake = await startFakeOpenAI({ port, defaultReply: demoReply });
process.stdout.write(
  `Fake OpenAI-compatible model listening on ${fake.url} (chat model fake-chat, demo mode).\n` +
    'Start the server against it with:\n' +
    `  OPENAI_BASE_URL=${fake.url} OPENAI_API_KEY=fake CHAT_MODEL=fake-chat pnpm start\n`,
);
const stop = () => {
  void fake.close().then(() => process.exit(0));
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
