import { describe, expect, it } from 'vitest';
import { AppError } from '../../errors/index.js';
import { assertValidSchedule, cronIntervalSeconds, minIntervalSeconds, nextTicks } from './cron.js';

const refusal = (cron: string, tz = 'UTC', min = 60) => {
  try {
    assertValidSchedule(cron, tz, min);
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    return { status: (err as AppError).status, message: (err as AppError).message };
  }
  return null;
};

describe('cron expressions of schedules', () => {
  it('measures the shortest time between two firings', () => {
    expect(cronIntervalSeconds('* * * * * *', 'UTC')).toBe(1);
    expect(cronIntervalSeconds('*/30 * * * * *', 'UTC')).toBe(30);
    expect(cronIntervalSeconds('0,50 0 * * * *', 'UTC')).toBe(50);
    expect(cronIntervalSeconds('58 0,1 * * * *', 'UTC')).toBe(60);
    expect(cronIntervalSeconds('* * * * *', 'UTC')).toBe(60);
    expect(cronIntervalSeconds('*/15 * * * *', 'UTC')).toBe(900);
    expect(cronIntervalSeconds('0 */2 * * *', 'UTC')).toBe(7200);
    expect(cronIntervalSeconds('59 23 * * *', 'UTC')).toBe(86_400);
    expect(cronIntervalSeconds('0 9,17 * * 1-5', 'UTC')).toBe(8 * 3600);
    // Across the hour: 10:59:30 then 11:00:10.
    expect(cronIntervalSeconds('10,30 0,59 10,11 * * *', 'UTC')).toBe(20);
    expect(cronIntervalSeconds('30 59 10,11 * * *', 'UTC')).toBe(3600);
    expect(cronIntervalSeconds('@daily', 'UTC')).toBe(86_400);
  });

  it('refuses firings below the minimum, bad expressions and unknown zones with the reason', () => {
    expect(refusal('* * * * * *')).toEqual({
      status: 400,
      message: 'cron fires every 1 seconds; the minimum interval is 60 seconds',
    });
    expect(refusal('*/30 * * * * *')?.message).toBe(
      'cron fires every 30 seconds; the minimum interval is 60 seconds',
    );
    expect(refusal('0 * * * * *')).toBeNull();
    expect(refusal('*/5 * * * * *', 'UTC', 5)).toBeNull();
    expect(refusal('*/15 * * * *', 'UTC', 3600)?.message).toBe(
      'cron fires every 900 seconds; the minimum interval is 3600 seconds',
    );
    expect(refusal('61 * * * *')).toEqual({
      status: 400,
      message: 'Invalid cron expression: Constraint error, got value 61 expected range 0-59',
    });
    expect(refusal('every day')?.message).toMatch(/^Invalid cron expression: /);
    expect(refusal('0 0 30 2 *')?.message).toMatch(/^Invalid cron expression: /);
    expect(refusal('0 9 * * *', 'Mars/Olympus_Mons')).toEqual({
      status: 400,
      message: 'Unknown time zone: Mars/Olympus_Mons',
    });
  });

  it('reads the expression in the zone, across DST changes', () => {
    const iso = (ds: Date[]) => ds.map((d) => d.toISOString());
    // 09:00 in Berlin: 08:00Z in winter, 07:00Z once summer time starts (29 March 2026).
    expect(iso(nextTicks('0 9 * * *', 'Europe/Berlin', new Date('2026-03-27T12:00:00Z'), 3))).toEqual([
      '2026-03-28T08:00:00.000Z',
      '2026-03-29T07:00:00.000Z',
      '2026-03-30T07:00:00.000Z',
    ]);
    // 02:30 does not exist in Berlin on 29 March: it fires once, at 03:30 CEST.
    expect(iso(nextTicks('30 2 * * *', 'Europe/Berlin', new Date('2026-03-28T12:00:00Z'), 2))).toEqual([
      '2026-03-29T01:30:00.000Z',
      '2026-03-30T00:30:00.000Z',
    ]);
    // 01:30 happens twice in New York on 1 November: it fires once.
    const fallBack = iso(nextTicks('30 1 * * *', 'America/New_York', new Date('2026-10-30T12:00:00Z'), 3));
    expect(fallBack[0]).toBe('2026-10-31T05:30:00.000Z');
    expect(fallBack.filter((t) => t.startsWith('2026-11-01'))).toHaveLength(1);
    expect(fallBack[2]).toBe('2026-11-02T06:30:00.000Z');
  });

  it('reads SCHEDULE_MIN_INTERVAL_SECONDS', () => {
    expect(minIntervalSeconds({})).toBe(60);
    expect(minIntervalSeconds({ SCHEDULE_MIN_INTERVAL_SECONDS: '1' })).toBe(1);
    expect(minIntervalSeconds({ SCHEDULE_MIN_INTERVAL_SECONDS: '0' })).toBe(60);
    expect(minIntervalSeconds({ SCHEDULE_MIN_INTERVAL_SECONDS: 'soon' })).toBe(60);
  });
});
