import OpenAI from 'openai';

/** A request given up by its caller (an aborted signal), whichever client made it. */
export const isAbortError = (err: unknown): boolean =>
  err instanceof OpenAI.APIUserAbortError || (err as { name?: string } | undefined)?.name === 'AbortError';
