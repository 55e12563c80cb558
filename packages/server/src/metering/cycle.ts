/**
 * Billing cycles: monthly from the workspace's `billing_cycle_anchor`. A cycle starts on the
 * anchor's day of month at the anchor's time of day (UTC); in shorter months an anchor on the
 * 29th-31st falls on the month's last day, as card billing does.
 */

function addMonthsClamped(anchor: Date, months: number): Date {
  const y = anchor.getUTCFullYear();
  const m = anchor.getUTCMonth() + months;
  const targetYear = y + Math.floor(m / 12);
  const targetMonth = ((m % 12) + 12) % 12;
  const lastDay = new Date(Date.UTC(targetYear, targetMonth + 1, 0)).getUTCDate();
  return new Date(
    Date.UTC(
      targetYear,
      targetMonth,
      Math.min(anchor.getUTCDate(), lastDay),
      anchor.getUTCHours(),
      anchor.getUTCMinutes(),
      anchor.getUTCSeconds(),
      anchor.getUTCMilliseconds(),
    ),
  );
}

/** Start of the cycle containing `now` (the anchor itself while `now` precedes it). */
export function cycleStart(anchor: Date, now: Date): Date {
  if (now.getTime() <= anchor.getTime()) return new Date(anchor.getTime());
  let months =
    (now.getUTCFullYear() - anchor.getUTCFullYear()) * 12 + (now.getUTCMonth() - anchor.getUTCMonth());
  let start = addMonthsClamped(anchor, months);
  while (start.getTime() > now.getTime()) {
    months--;
    start = addMonthsClamped(anchor, months);
  }
  return start;
}

/** When the cycle containing `now` ends (the next reset). */
export function nextCycleStart(anchor: Date, now: Date): Date {
  const start = cycleStart(anchor, now);
  let months =
    (start.getUTCFullYear() - anchor.getUTCFullYear()) * 12 + (start.getUTCMonth() - anchor.getUTCMonth());
  let next = addMonthsClamped(anchor, months + 1);
  while (next.getTime() <= start.getTime()) {
    months++;
    next = addMonthsClamped(anchor, months + 1);
  }
  return next;
}

/**
 * The start of the billing cycle containing now() as SQL, the same as `cycleStart` computes
 * (UTC, month-end clamping: PostgreSQL's timestamp + months clamps the day the same way),
 * truncated to milliseconds like a JavaScript Date.
 */
export const CYCLE_START_SQL = (anchor: string) => `(with a as (
    select date_trunc('milliseconds', ${anchor} at time zone 'UTC') as a, now() at time zone 'UTC' as n
  ), m as (
    select a, n, ((extract(year from n) - extract(year from a)) * 12
                  + extract(month from n) - extract(month from a))::int as m from a
  )
  select (case when n <= a then a
               when a + make_interval(months => m) > n then a + make_interval(months => m - 1)
               else a + make_interval(months => m) end) at time zone 'UTC'
    from m)`;
