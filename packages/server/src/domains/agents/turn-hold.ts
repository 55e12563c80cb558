import { BoundedMap } from '../../bounded-map.js';
import type { GenerationInput, GenerationMeter, Metering } from '../../metering/types.js';
import type { ModelCatalog, ModelInfo } from '../../providers/llm.js';

/**
 * The credit hold of an assist turn's first model call, taken by the admission statement
 * (decision 0029). The hold's amount needs the prompt's size: the agent's system prompt and
 * tool definitions, then the user's message. The process remembers, per session, what the
 * first call of its last turn sent besides the user's message; the next turn's admission sizes
 * the hold from it and the statement takes it only if the session's agent is still the row
 * that turn saw (same `updated_at`). The turn's first call uses the hold only if it sends
 * exactly the guessed characters to the guessed model (then the hold is the one
 * `startGeneration` would take); otherwise it gives the hold back and takes its own.
 */
export interface TurnHoldGuess {
  agentId: string;
  /** The agent row's `updated_at` as the database wrote it (full precision). */
  agentUpdatedAt: string;
  /** The turn's model override (`model` in the message body), null for the agent's own. */
  modelOverride: string | null;
  modelId: string;
  /** Characters of the first call besides the user's message (system prompt, tools). */
  fixedChars: number;
}

/** What the admission hands to the turn it started in this process. */
export interface AdmittedHold {
  meter: GenerationMeter;
  inputChars: number;
  modelId: string;
}

export const MESSAGES_ENDPOINT = '/managed-agents/sessions/{sessionId}/messages';

/** The guesses of this process, per session. */
export const turnHoldGuesses = new BoundedMap<string, TurnHoldGuess>(10_000);

/**
 * The hold a key turn's admission statement takes for the session's guess (none without a
 * guess for the session, for another model override, or a model the catalog no longer has).
 */
export function prepareTurnHold(
  deps: { metering: Metering; models?: ModelCatalog },
  sessionId: string,
  runId: string,
  input: { message: string; model?: string },
  requestId: string,
):
  | {
      statement: { ctes: string; params: unknown[]; agentId: string; agentUpdatedAt: string };
      adopt(
        key: { id: string; workspace_id: string },
        held: { micros: number; inputTokens: number },
      ): AdmittedHold;
    }
  | undefined {
  const guess = turnHoldGuesses.get(sessionId);
  if (!guess || !deps.models || guess.modelOverride !== (input.model ?? null)) return undefined;
  let model: ModelInfo;
  try {
    model = deps.models.resolve('chat', guess.modelId);
  } catch {
    return undefined;
  }
  if (model.id !== guess.modelId) return undefined;
  // The runtime's `startGeneration` input for the turn's first call, less what the statement
  // knows (workspace, key, session).
  const base = {
    appId: guess.agentId,
    runId,
    requestId: requestId || runId,
    endpoint: MESSAGES_ENDPOINT,
    model,
    meter: 'credits' as const,
  };
  const inputChars = guess.fixedChars + input.message.length;
  const hold = deps.metering.holdInStatement(base, { inputChars });
  return {
    statement: {
      ctes: hold.ctes,
      params: hold.params,
      agentId: guess.agentId,
      agentUpdatedAt: guess.agentUpdatedAt,
    },
    adopt: (key, held) => ({
      meter: hold.adopt(
        { ...base, workspaceId: key.workspace_id, apiKeyId: key.id, sessionId } satisfies GenerationInput,
        held.micros,
        held.inputTokens,
      ),
      inputChars,
      modelId: model.id,
    }),
  };
}
