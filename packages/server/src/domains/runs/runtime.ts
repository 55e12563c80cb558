import type { ServerDeps } from '../../context.js';
import { createAutonomousExecutor } from './executor.js';
import { RunWebhookDispatcher } from './webhook.js';

/**
 * Wires autonomous runs into the process: the `autonomous` executor on the run engine and
 * the completion-webhook dispatcher. Returns what `close()` must stop.
 */
export function registerAutonomousRuns(deps: ServerDeps): { stop(): Promise<void> } {
  deps.runs.register(createAutonomousExecutor(deps));
  const webhooks = new RunWebhookDispatcher(deps);
  webhooks.start();
  return { stop: () => webhooks.stop() };
}
