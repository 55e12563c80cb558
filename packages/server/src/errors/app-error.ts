import { ERRORS, type ErrorDefinition, type ErrorKey } from './table.js';

/** The one error body of the API: `{ error, code?, details? }` (spec section 7). */
export interface ErrorBody {
  error: string;
  code?: string;
  details?: Record<string, unknown>;
}

/** The `{name}` placeholders of a message. */
type Placeholders<S extends string> = S extends `${string}{${infer P}}${infer Rest}`
  ? P | Placeholders<Rest>
  : never;
type Definition<K extends ErrorKey> = (typeof ERRORS)[K];
type VariantOf<K extends ErrorKey> = Definition<K> extends { variants: infer V } ? keyof V & string : never;
type ParamsOf<K extends ErrorKey> = Placeholders<Definition<K>['message']>;

interface ErrorExtras {
  details?: Record<string, unknown>;
  headers?: Record<string, string>;
}

/** What `appError(key, …)` takes: every placeholder of the key's message, and the variant if any. */
export type ErrorArgs<K extends ErrorKey> = ErrorExtras & { [P in ParamsOf<K>]: string | number } & ([
    VariantOf<K>,
  ] extends [never]
    ? unknown
    : { variant?: VariantOf<K> });

/** Loose form of the arguments, as the class reads them. */
type AnyErrorArgs = ErrorExtras & { variant?: string; [param: string]: unknown };

const PLACEHOLDER = /\{(\w+)\}/g;

function render(def: ErrorDefinition, args: AnyErrorArgs): string {
  const text = args.variant !== undefined ? (def.variants?.[args.variant] ?? def.message) : def.message;
  return text.includes('{') ? text.replace(PLACEHOLDER, (_, name: string) => String(args[name])) : text;
}

/**
 * The error every layer throws: a key of the error table, which fixes its status, code and
 * message. The tRPC wrapper, raw routes, SSE writers and the final express handler all render
 * it the same way.
 */
export class AppError extends Error {
  override name = 'AppError';
  readonly status: number;
  readonly code?: string;
  readonly details?: Record<string, unknown>;
  readonly headers?: Record<string, string>;

  constructor(
    readonly key: ErrorKey,
    args: AnyErrorArgs = {},
  ) {
    const def: ErrorDefinition = ERRORS[key];
    super(render(def, args));
    this.status = def.status;
    this.code = def.code;
    this.details = args.details;
    this.headers = def.headers || args.headers ? { ...def.headers, ...args.headers } : undefined;
  }

  toBody(): ErrorBody {
    const body: ErrorBody = { error: this.message };
    if (this.code !== undefined) body.code = this.code;
    if (this.details !== undefined) body.details = this.details;
    return body;
  }
}

/** `appError('RUN_NOT_ACTIVE', { status: run.status })`: the typed way to make an AppError. */
export function appError<K extends ErrorKey>(
  key: K,
  ...args: [ParamsOf<K>] extends [never] ? [args?: ErrorArgs<K>] : [args: ErrorArgs<K>]
): AppError {
  return new AppError(key, args[0] as AnyErrorArgs | undefined);
}
