import { CronExpressionParser } from 'cron-parser';
import { appError } from '../../errors/index.js';

/**
 * Cron expressions of schedules, through `cron-parser` (5 fields, or 6 with seconds first;
 * `@daily`-style aliases), evaluated in an IANA time zone with its DST rules: a wall-clock time
 * that does not exist on a spring-forward day fires once at the first instant after the gap;
 * a time repeated on a fall-back day fires once.
 */

export const DEFAULT_MIN_INTERVAL_SECONDS = 60;
export const CRON_MAX_LENGTH = 200;

/** `SCHEDULE_MIN_INTERVAL_SECONDS` (default 60, at least 1). */
export function minIntervalSeconds(env: Record<string, string | undefined>): number {
  const raw = env.SCHEDULE_MIN_INTERVAL_SECONDS;
  const n = raw === undefined || raw.trim() === '' ? Number.NaN : Number(raw);
  return Number.isInteger(n) && n >= 1 ? n : DEFAULT_MIN_INTERVAL_SECONDS;
}

/** True for a time zone name the runtime's ICU knows (IANA names such as `Europe/Berlin`). */
export function isTimeZone(tz: string): boolean {
  if (!tz || tz.length > 64) return false;
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

function parse(cron: string, timezone: string, currentDate?: Date) {
  return CronExpressionParser.parse(cron, { tz: timezone, currentDate: currentDate ?? new Date() });
}

const sortedValues = (values: readonly (number | string)[]) =>
  [...new Set(values.filter((v): v is number => typeof v === 'number'))].sort((a, b) => a - b);

const consecutiveGaps = (xs: number[]) => xs.slice(1).map((x, i) => x - (xs[i] as number));

/**
 * The shortest time between two firings of the expression, in seconds, from its second,
 * minute and hour fields (a cron's times of day are every combination of the three). Days are
 * taken as possibly consecutive, so the figure is exact up to a day and never longer than the
 * real one; DST shifts are left out.
 */
export function shortestIntervalSeconds(fields: {
  second: readonly (number | string)[];
  minute: readonly (number | string)[];
  hour: readonly (number | string)[];
}): number {
  const s = sortedValues(fields.second);
  const m = sortedValues(fields.minute);
  const h = sortedValues(fields.hour);
  if (s.length === 0 || m.length === 0 || h.length === 0) return 86_400;
  const first = (xs: number[]) => xs[0] as number;
  const last = (xs: number[]) => xs[xs.length - 1] as number;
  const [s0, sN, m0, mN, h0, hN] = [first(s), last(s), first(m), last(m), first(h), last(h)];
  const gaps = [
    ...consecutiveGaps(s),
    ...consecutiveGaps(m).map((d) => d * 60 - sN + s0),
    ...consecutiveGaps(h).map((d) => d * 3600 - (mN * 60 + sN) + (m0 * 60 + s0)),
    86_400 - (hN * 3600 + mN * 60 + sN) + (h0 * 3600 + m0 * 60 + s0),
  ];
  return Math.min(...gaps);
}

const intervalOf = (expr: ReturnType<typeof parse>) =>
  shortestIntervalSeconds({
    second: expr.fields.second.values,
    minute: expr.fields.minute.values,
    hour: expr.fields.hour.values,
  });

/** `shortestIntervalSeconds` of an expression (which must parse). */
export const cronIntervalSeconds = (cron: string, timezone: string) => intervalOf(parse(cron, timezone));

/**
 * Checks a schedule's expression and zone; every refusal is a 400 naming the reason (unknown
 * zone, the parser's message, a cron that never fires, or one firing more often than
 * `minSeconds`).
 */
export function assertValidSchedule(cron: string, timezone: string, minSeconds: number): void {
  if (!isTimeZone(timezone)) {
    throw appError('SCHEDULE_TIMEZONE_UNKNOWN', { timezone, details: { timezone } });
  }
  let expr: ReturnType<typeof parse>;
  try {
    expr = parse(cron, timezone);
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw appError('SCHEDULE_CRON_INVALID', { reason, details: { cron } });
  }
  const gap = intervalOf(expr);
  if (gap < minSeconds) {
    throw appError('SCHEDULE_CRON_INTERVAL_TOO_SHORT', {
      gap,
      minSeconds,
      details: { cron, intervalSeconds: gap, minIntervalSeconds: minSeconds },
    });
  }
  if (nextTicks(cron, timezone, new Date(), 1).length === 0) {
    throw appError('SCHEDULE_CRON_INVALID', { reason: 'it never fires', details: { cron } });
  }
}

/** The next `count` firings strictly after `after` (fewer when the expression runs out). */
export function nextTicks(cron: string, timezone: string, after: Date, count: number): Date[] {
  const expr = parse(cron, timezone, after);
  const out: Date[] = [];
  for (let i = 0; i < count; i++) {
    if (!expr.hasNext()) break;
    try {
      out.push(expr.next().toDate());
    } catch {
      break;
    }
  }
  return out;
}

/** The first firing strictly after `after`, or null. */
export function nextTick(cron: string, timezone: string, after: Date): Date | null {
  return nextTicks(cron, timezone, after, 1)[0] ?? null;
}
