// A year of schedules through the database: materialized day by day over
// 2026, each schedule's occurrences number what the documented DST rule
// predicts, none is duplicated, and each falls at the right local time.
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../src/config.ts';
import { silentLogger } from '../../src/log.ts';
import { materializeDueSchedules } from '../../src/schedules/materialize.ts';
import { useTestDatabase } from '../helpers/db.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();

const localTime = (d: Date, timeZone: string) =>
  new Intl.DateTimeFormat('en-GB', { timeZone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(d);
const localDay = (d: Date, timeZone: string) =>
  new Intl.DateTimeFormat('en-GB', { timeZone, weekday: 'short' }).format(d);

describe('a year of occurrences', () => {
  it('daily, weekly and hourly schedules in five zones fire exactly as the DST rule says', async () => {
    const api = createTestApi(t.db);
    api.setNow(new Date('2025-12-31T00:00:00Z'));
    const common = { task: 'noop', queue: 'year', misfire: 'catch_up', misfireGrace: 86_400, catchUpLimit: 1000 };
    const schedules: Record<string, Record<string, unknown>> = {
      'ny-0230': { cron: '30 2 * * *', timezone: 'America/New_York' },
      'berlin-0900': { recurrence: { every: 1, unit: 'days', start: '2026-01-01T08:00:00Z' }, timezone: 'Europe/Berlin' },
      'lordhowe-sun-0215': { recurrence: { every: 1, unit: 'weeks', start: '2026-01-04T02:15:00+11:00' }, timezone: 'Australia/Lord_Howe' },
      'kolkata-hourly': { cron: '0 * * * *', timezone: 'Asia/Kolkata' },
      'utc-0000': { cron: '0 0 * * *', timezone: 'UTC' },
    };
    for (const [name, spec] of Object.entries(schedules)) {
      const r = await api.admin('PUT', `/v1/schedules/${name}`, { tenant: 'year', body: { ...common, ...spec } });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
    }
    // Nothing may be claimed: this test is about occurrences.
    await api.admin('PUT', '/v1/admin/queues/year', { body: { paused: true } });

    const deps = { db: t.db, config: { ...defaultConfig, lookaheadSeconds: 0 }, log: silentLogger };
    for (let day = 0; day <= 365; day++) {
      const now = new Date(Date.UTC(2026, 0, 1, 12) + day * 86_400_000);
      await materializeDueSchedules(deps, { now, deadline: Infinity, elapsed: () => 0 });
    }

    const rows = await t.db.query<{ name: string; at: Date }>(
      `select s.name, t.scheduled_for as at from tasks t join schedules s on s.id = t.schedule_id
       where t.scheduled_for >= '2026-01-01T00:00:00Z' and t.scheduled_for < '2027-01-01T00:00:00Z'
       order by 1, 2`,
    );
    const byName = new Map<string, Date[]>();
    for (const r of rows) byName.set(r.name, [...(byName.get(r.name) ?? []), r.at]);
    const dup = await t.db.query(`select schedule_id, scheduled_for from tasks group by 1, 2 having count(*) > 1`);
    expect(dup).toEqual([]);

    // New York: 365 fires; 2026-03-08 has no 02:30, so that day fires at 03:30 (shifted by the gap).
    const ny = byName.get('ny-0230')!.filter((d) => d < new Date('2027-01-01T00:00:00-05:00'));
    expect(ny).toHaveLength(365);
    expect(ny.filter((d) => localTime(d, 'America/New_York') === '03:30').map((d) => d.toISOString())).toEqual(['2026-03-08T07:30:00.000Z']);
    expect(ny.every((d) => ['02:30', '03:30'].includes(localTime(d, 'America/New_York')))).toBe(true);

    // Berlin: 09:00 local all year (365 fires, both DST changes kept at 09:00).
    const berlin = byName.get('berlin-0900')!;
    expect(berlin).toHaveLength(365);
    expect(berlin.every((d) => localTime(d, 'Europe/Berlin') === '09:00')).toBe(true);

    // Lord Howe: every Sunday 02:15 (52 in 2026 from Jan 4); on 2026-10-04 02:15 falls in the
    // 30-minute gap and fires at 02:45.
    const lh = byName.get('lordhowe-sun-0215')!.filter((d) => d < new Date('2027-01-01T00:00:00+11:00'));
    expect(lh).toHaveLength(52);
    expect(lh.every((d) => localDay(d, 'Australia/Lord_Howe') === 'Sun')).toBe(true);
    expect(lh.filter((d) => localTime(d, 'Australia/Lord_Howe') !== '02:15').map((d) => [d.toISOString(), localTime(d, 'Australia/Lord_Howe')])).toEqual([
      ['2026-10-03T15:45:00.000Z', '02:45'],
    ]);

    // Kolkata (no DST, +05:30): one fire per real hour, always at :00 local.
    const kolkata = byName.get('kolkata-hourly')!;
    expect(kolkata).toHaveLength(8760);
    expect(kolkata.every((d) => localTime(d, 'Asia/Kolkata').endsWith(':00'))).toBe(true);

    expect(byName.get('utc-0000')).toHaveLength(365);
  }, 180_000);
});
