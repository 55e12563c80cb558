import { z } from 'zod';

/**
 * A page number of a list endpoint from the query string: not a number is 400; out of range
 * is clamped, as the spec's lists say ("capped at", "clamped to"), never refused.
 */
const clampedInt = (field: string, min: number, max: number, fallback: number) =>
  z.coerce
    .number({ error: `${field} must be a number` })
    .refine(Number.isFinite, `${field} must be a number`)
    .transform((n) => Math.min(max, Math.max(min, Math.trunc(n))))
    .default(fallback);

/** `limit` of the sessions and runs lists: default 25, clamped to 1..100. */
export const PageLimit = clampedInt('limit', 1, 100, 25).describe(
  'Items per page: default 25, clamped to 1 to 100.',
);

/** `offset` of a list endpoint: default 0; a negative value counts as 0. */
export const PageOffset = clampedInt('offset', 0, Number.MAX_SAFE_INTEGER, 0).describe(
  'Items to skip: default 0; a negative value counts as 0.',
);
