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
