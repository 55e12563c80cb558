/** Child process: a local OTLP/HTTP receiver (decodes what it receives, as a collector would); counts spans. */
import { startOtlpReceiver } from '@ai-suite/testkit';

const receiver = await startOtlpReceiver();
let total = 0;
setInterval(() => {
  total += receiver.spans.length;
  receiver.clear();
}, 200).unref();
process.on('message', (m: { type?: string }) => {
  if (m.type === 'count') process.send?.({ type: 'count', spans: total + receiver.spans.length });
});
process.send?.({ type: 'ready', url: receiver.url });
process.on('disconnect', () => {
  void receiver.close().then(() => process.exit(0));
});
