import type { ServerDeps } from '../../context.js';
import { ScheduleTicker } from './ticker.js';

/** Starts this process's schedule ticker (composition root); returns what `close()` stops. */
export function registerScheduleTicker(deps: ServerDeps): { stop(): Promise<void> } {
  const ticker = new ScheduleTicker(deps);
  ticker.start();
  return { stop: () => ticker.stop() };
}
