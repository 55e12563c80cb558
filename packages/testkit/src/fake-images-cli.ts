/**
 * `pnpm fake-images`: the fake image providers on fixed ports, to try image generation and the
 * `ultrasound` profile (examples/image-enhance) without a provider: a Replicate-compatible
 * predictions API and an OpenAI-compatible images API. Prints the variables that point the
 * server at them. FAKE_REPLICATE_PORT and FAKE_OPENAI_IMAGES_PORT pick the ports (default 4011
 * and 4012; 0 = any free one).
 */
import { startFakeOpenAIImages } from './fake-openai-images.js';
import { startFakeReplicate } from './fake-replicate.js';

const replicate = await startFakeReplicate({ port: Number(process.env.FAKE_REPLICATE_PORT ?? 4011) });
const openai = await startFakeOpenAIImages({ port: Number(process.env.FAKE_OPENAI_IMAGES_PORT ?? 4012) });
process.stdout.write(
  `Fake Replicate predictions API listening on ${replicate.baseUrl} (any model, any token).\n` +
    `Fake OpenAI images API listening on ${openai.baseUrl} (any model, any key).\n` +
    'Start the server against them with:\n' +
    `  REPLICATE_BASE_URL=${replicate.baseUrl} REPLICATE_API_TOKEN=fake IMAGE_MODEL=fake/scan-enhancer ` +
    `IMAGE_ALT_BASE_URL=${openai.baseUrl} IMAGE_ALT_API_KEY=fake IMAGE_ALT_MODEL=gpt-image-1 pnpm start\n`,
);
const stop = () => {
  void Promise.all([replicate.close(), openai.close()]).then(() => process.exit(0));
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
