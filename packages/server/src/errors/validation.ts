import { type AppError, appError } from './app-error.js';

/** Messages zod writes by itself (as opposed to the spec's own, set on each schema). */
const ZOD_DEFAULT_MESSAGE =
  /^(Invalid (input|option|string|key|element|union|type|format|number|date)\b|Too (big|small)|Unrecognized|Expected|Required$)/;

export interface IssueLike {
  path: readonly PropertyKey[];
  message: string;
  /** zod's issue code; `unrecognized_keys` carries the offending `keys`. */
  code?: string;
  keys?: readonly string[];
}

/** One issue per unknown key, its path ending with the key, so the caller sees where it is. */
function expandUnknownKeys(issues: readonly IssueLike[]): IssueLike[] {
  return issues.flatMap((i) =>
    i.code === 'unrecognized_keys' && i.keys?.length
      ? i.keys.map((k) => ({ path: [...i.path, k], message: 'Unknown key', code: i.code }))
      : [i],
  );
}

/**
 * A validation failure becomes the spec's message when the schema carries one, or
 * `<path>: <zod message>` otherwise, with every issue listed under `details.issues`. Code
 * `VALIDATION_ERROR` unless the endpoint's spec names another (artifacts: `INVALID_INPUT`).
 */
export function validationError(
  rawIssues: readonly IssueLike[],
  key: 'VALIDATION_ERROR' | 'INVALID_INPUT' = 'VALIDATION_ERROR',
): AppError {
  const issues = expandUnknownKeys(rawIssues);
  const first = issues[0];
  const render = (i: IssueLike) => {
    const p = i.path.map(String).join('.');
    if (i.code === 'unrecognized_keys') return `Unknown key: ${p}`;
    return ZOD_DEFAULT_MESSAGE.test(i.message) && p ? `${p}: ${i.message}` : i.message;
  };
  return appError(key, {
    message: first ? render(first) : 'Invalid request body',
    details: { issues: issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message })) },
  });
}
