import { z } from 'zod';

const LIMIT_MESSAGE = 'limit must be a number between 1 and 100';
const OFFSET_MESSAGE = 'offset must be a non-negative number';

/** `limit` of a list endpoint: 1–100 from the query string, default 25. */
export const PageLimit = z.coerce
  .number({ error: LIMIT_MESSAGE })
  .int(LIMIT_MESSAGE)
  .min(1, LIMIT_MESSAGE)
  .max(100, LIMIT_MESSAGE)
  .default(25);

/** `offset` of a list endpoint: ≥ 0 from the query string, default 0. */
export const PageOffset = z.coerce
  .number({ error: OFFSET_MESSAGE })
  .int(OFFSET_MESSAGE)
  .min(0, OFFSET_MESSAGE)
  .default(0);
