// Recurrence maths against an oracle built on Intl alone (no luxon, nothing
// from the module): whole-year simulations in five zones, every DST
// transition day of 2026 in New York, London and Lord Howe, month ends, leap
// years, validation and the small API around fireTimesBetween.
import { CronExpressionParser } from 'cron-parser';
import { describe, expect, it } from 'vitest';
import { AppError } from '../../src/errors.ts';
import {
  fireTimesBetween,
  nextFireTime,
  nextFireTimes,
  validateSpec,
  type ScheduleSpec,
} from '../../src/schedules/recurrence.ts';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

// --- The oracle -------------------------------------------------------------

const formatters = new Map<string, Intl.DateTimeFormat>();
/** `YYYY-MM-DD HH:mm:ss` on the wall clock of `zone`. */
function local(zone: string, t: number | Date): string {
  let f = formatters.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: zone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
    });
    formatters.set(zone, f);
  }
  const p = Object.fromEntries(f.formatToParts(t).map((x) => [x.type, x.value]));
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second}`;
}
/** A wall-clock reading as milliseconds "as if UTC". */
const wallMs = (reading: string) => Date.parse(`${reading.replace(' ', 'T')}Z`);
const readingOf = (wall: number) => new Date(wall).toISOString().slice(0, 19).replace('T', ' ');
const offsetAt = (zone: string, t: number) => wallMs(local(zone, t)) - Math.floor(t / 1000) * 1000;

/** Every instant whose local reading in `zone` is `reading`, ascending. */
function instantsReading(zone: string, reading: string): number[] {
  const w = wallMs(reading);
  const offsets = new Set([offsetAt(zone, w - 36 * HOUR), offsetAt(zone, w + 36 * HOUR)]);
  return [...offsets]
    .map((o) => w - o)
    .filter((t) => local(zone, t) === reading)
    .sort((a, b) => a - b);
}

/**
 * The documented rule: a missing reading fires at the reading shifted forward
 * by the gap's length; a repeated one at its first instant (or at both, for
 * an every-hour cron).
 */
function ruleInstants(zone: string, reading: string, bothWhenRepeated = false): number[] {
  const found = instantsReading(zone, reading);
  if (found.length > 0) return bothWhenRepeated ? found : [found[0]!];
  const w = wallMs(reading);
  const gap = offsetAt(zone, w + 36 * HOUR) - offsetAt(zone, w - 36 * HOUR);
  expect(gap).toBeGreaterThan(0);
  const shifted = instantsReading(zone, readingOf(w + gap));
  expect(shifted).toHaveLength(1);
  return shifted;
}

const datesOf2026 = Array.from({ length: 365 }, (_, i) => new Date(Date.UTC(2026, 0, 1 + i)).toISOString().slice(0, 10));
const iso = (ts: readonly (number | Date)[]) => ts.map((t) => new Date(t).toISOString());
const sortedUnique = (ts: number[]) => [...new Set(ts)].sort((a, b) => a - b);

/** The year 2026 on the wall clock of `zone`: [local Jan 1 00:00, local Jan 1 2027 00:00). */
function year2026(zone: string) {
  return { from: instantsReading(zone, '2026-01-01 00:00:00')[0]!, to: instantsReading(zone, '2027-01-01 00:00:00')[0]! };
}
/** Every fire time of the local year 2026. */
function simulateYear(spec: ScheduleSpec, zone: string): number[] {
  const { from, to } = year2026(zone);
  return fireTimesBetween(spec, new Date(from - 1), new Date(to - 1), 100_000).map((d) => d.getTime());
}
/** Fire times within one local day, as local readings. */
function dayReadings(spec: ScheduleSpec, zone: string, date: string): string[] {
  const from = instantsReading(zone, `${date} 00:00:00`)[0]!;
  const to = instantsReading(zone, `${readingOf(wallMs(`${date} 00:00:00`) + DAY).slice(0, 10)} 00:00:00`)[0]!;
  return fireTimesBetween(spec, new Date(from - 1), new Date(to - 1), 10_000).map((d) => local(zone, d));
}

function expectAscendingUnique(ts: readonly number[]) {
  const firstOutOfOrder = ts.findIndex((t, i) => i > 0 && t <= ts[i - 1]!);
  expect(firstOutOfOrder).toBe(-1);
}

/** Each fire time reads `slot` locally, or, on a day without that reading, the slot shifted by the gap. */
function expectAtSlotOrShifted(zone: string, slot: string, ts: readonly number[]) {
  let shifted = 0;
  for (const t of ts) {
    const reading = local(zone, t);
    if (reading.slice(11) === slot) continue;
    const wanted = `${reading.slice(0, 10)} ${slot}`;
    expect(instantsReading(zone, wanted), `${wanted} exists, yet fired at ${reading}`).toEqual([]);
    const gap = offsetAt(zone, t) - offsetAt(zone, t - DAY);
    expect(reading).toBe(readingOf(wallMs(wanted) + gap));
    shifted++;
  }
  return shifted;
}

const ZONES = ['Europe/Berlin', 'America/New_York', 'Australia/Lord_Howe', 'Asia/Kolkata', 'UTC'] as const;
// 01:30/02:30 sit in New York's and Berlin's repeated hour or gap, 01:45 in
// Lord Howe's repeated half hour, 02:00/02:15 in its gap.
const SLOTS = ['00:00', '01:30', '01:45', '02:00', '02:15', '02:30', '23:30'] as const;
/** Days of 2026 on which `HH:mm` does not exist in the zone, and on which it occurs twice. */
const GAP_DAYS: Record<string, Partial<Record<string, string>>> = {
  'Europe/Berlin': { '02:00': '2026-03-29', '02:15': '2026-03-29', '02:30': '2026-03-29' },
  'America/New_York': { '02:00': '2026-03-08', '02:15': '2026-03-08', '02:30': '2026-03-08' },
  'Australia/Lord_Howe': { '02:00': '2026-10-04', '02:15': '2026-10-04' },
};

// --- Whole years ------------------------------------------------------------

describe('a whole year (2026) in five zones', () => {
  for (const zone of ZONES) {
    for (const slot of SLOTS) {
      const [hh, mm] = slot.split(':').map(Number) as [number, number];
      const expected = () => datesOf2026.flatMap((d) => ruleInstants(zone, `${d} ${slot}:00`));

      it(`daily cron at ${slot}, ${zone}: 365 fires, at ${slot} local or shifted past the gap`, () => {
        const got = simulateYear({ kind: 'cron', cron: `${mm} ${hh} * * *`, timezone: zone }, zone);
        expect(got).toHaveLength(365);
        expectAscendingUnique(got);
        expect(iso(got)).toEqual(iso(expected()));
        expect(new Set(got.map((t) => local(zone, t).slice(0, 10))).size).toBe(365); // one per local day
        const gapDay = GAP_DAYS[zone]?.[slot];
        expect(expectAtSlotOrShifted(zone, `${slot}:00`, got)).toBe(gapDay ? 1 : 0);
      });

      it(`daily recurrence at ${slot}, ${zone}: the same 365 instants as the cron`, () => {
        const start = new Date(ruleInstants(zone, `2026-01-01 ${slot}:00`)[0]!);
        const got = simulateYear({ kind: 'recurrence', every: 1, unit: 'days', start, timezone: zone }, zone);
        expect(got).toHaveLength(365);
        expect(iso(got)).toEqual(iso(expected()));
      });
    }

    it(`weekly recurrence on Sundays at 02:15 and 01:45, ${zone}: 52 fires, DST Sundays included`, () => {
      // Every DST change of 2026 in these zones falls on a Sunday.
      for (const slot of ['01:45:00', '02:15:00']) {
        const sundays = datesOf2026.filter((d) => new Date(`${d}T00:00:00Z`).getUTCDay() === 0);
        expect(sundays).toHaveLength(52);
        const expected = sundays.flatMap((d) => ruleInstants(zone, `${d} ${slot}`));
        const start = new Date(expected[0]!);
        const got = simulateYear({ kind: 'recurrence', every: 1, unit: 'weeks', start, timezone: zone }, zone);
        expect(got).toHaveLength(52);
        expectAscendingUnique(got);
        expect(iso(got)).toEqual(iso(expected));
        expectAtSlotOrShifted(zone, slot, got);
      }
    });

    it(`hourly cron, ${zone}: 8760 fires, both instants of a repeated hour`, () => {
      const got = simulateYear({ kind: 'cron', cron: '0 * * * *', timezone: zone }, zone);
      const expected = sortedUnique(
        datesOf2026.flatMap((d) =>
          Array.from({ length: 24 }, (_, h) => ruleInstants(zone, `${d} ${String(h).padStart(2, '0')}:00:00`, true)).flat(),
        ),
      );
      // 8760 everywhere: New York and Berlin lose the gap's hh:00 (it merges
      // with the next real hour) and gain the repeated one; Lord Howe's gap
      // (02:00-02:30) and repeat (01:30-02:00) move or hold no hh:00 twice.
      expect(got).toHaveLength(8760);
      expect(expected).toHaveLength(8760);
      expectAscendingUnique(got);
      expect(iso(got)).toEqual(iso(expected));
      expect(got.map((t) => local(zone, t)).filter((r) => !/:(00|30):00$/.test(r))).toEqual([]);
    });

    it(`hourly recurrence, ${zone}: 8760 elapsed hours, exactly an hour apart`, () => {
      const { from, to } = year2026(zone);
      const got = simulateYear({ kind: 'recurrence', every: 1, unit: 'hours', start: new Date(from), timezone: zone }, zone);
      expect(got).toHaveLength(8760);
      expect(got).toHaveLength((to - from) / HOUR);
      expect(got[0]).toBe(from);
      for (let i = 1; i < got.length; i++) expect(got[i]! - got[i - 1]!).toBe(HOUR);
    });
  }

  it('hourly recurrence is elapsed time: Lord Howe reads hh:30 on standard time, New York skips 02:00 and repeats 01:00', () => {
    const lh = simulateYear(
      { kind: 'recurrence', every: 1, unit: 'hours', start: new Date(year2026('Australia/Lord_Howe').from), timezone: 'Australia/Lord_Howe' },
      'Australia/Lord_Howe',
    ).map((t) => local('Australia/Lord_Howe', t));
    expect(lh).toContain('2026-06-01 12:30:00');
    expect(lh).not.toContain('2026-06-01 12:00:00');
    expect(lh).toContain('2026-12-01 12:00:00');

    const ny = simulateYear(
      { kind: 'recurrence', every: 1, unit: 'hours', start: new Date(year2026('America/New_York').from), timezone: 'America/New_York' },
      'America/New_York',
    ).map((t) => local('America/New_York', t));
    expect(ny.filter((r) => r.startsWith('2026-03-08'))).toHaveLength(23);
    expect(ny).not.toContain('2026-03-08 02:00:00');
    expect(ny.filter((r) => r === '2026-11-01 01:00:00')).toHaveLength(2);
  });

  it('a cron with several rules that meet in the gap fires once per instant: 0,30 2,3 in New York, 1458 a year', () => {
    const got = simulateYear({ kind: 'cron', cron: '0,30 2,3 * * *', timezone: 'America/New_York' }, 'America/New_York');
    // 4 a day, but on Mar 8 02:00 and 02:30 become 03:00 and 03:30, which fire anyway.
    expect(got).toHaveLength(365 * 4 - 2);
    expectAscendingUnique(got);
    expect(dayReadings({ kind: 'cron', cron: '0,30 2,3 * * *', timezone: 'America/New_York' }, 'America/New_York', '2026-03-08')).toEqual([
      '2026-03-08 03:00:00',
      '2026-03-08 03:30:00',
    ]);
  });
});

// --- DST transition days ----------------------------------------------------

describe('DST transition days', () => {
  const cron = (expr: string, timezone: string): ScheduleSpec => ({ kind: 'cron', cron: expr, timezone });
  const daily = (reading: string, timezone: string): ScheduleSpec => ({
    kind: 'recurrence',
    every: 1,
    unit: 'days',
    start: new Date(ruleInstants(timezone, reading)[0]!),
    timezone,
  });
  const hours = (from: number, to: number, minute = '00') =>
    Array.from({ length: to - from + 1 }, (_, i) => `${String(from + i).padStart(2, '0')}:${minute}:00`);

  it('New York, 2026-03-08 (02:00 EST -> 03:00 EDT): 02:30 fires at 03:30 EDT; hourly fires 23 times', () => {
    const z = 'America/New_York';
    const next = nextFireTime(cron('30 2 * * *', z), new Date('2026-03-07T12:00:00Z'));
    expect(next!.toISOString()).toBe('2026-03-08T07:30:00.000Z');
    expect(local(z, next!)).toBe('2026-03-08 03:30:00');
    expect(iso(nextFireTimes(daily('2026-01-01 02:30:00', z), new Date('2026-03-07T12:00:00Z'), 2))).toEqual([
      '2026-03-08T07:30:00.000Z',
      '2026-03-09T06:30:00.000Z',
    ]);
    expect(dayReadings(cron('0 * * * *', z), z, '2026-03-08')).toEqual(
      ['00:00:00', '01:00:00', ...hours(3, 23)].map((h) => `2026-03-08 ${h}`),
    );
    expect(dayReadings(cron('*/15 * * * *', z), z, '2026-03-08')).toHaveLength(92);
  });

  it('New York, 2026-11-01 (02:00 EDT -> 01:00 EST): 01:30 fires once, on EDT; hourly fires 25 times', () => {
    const z = 'America/New_York';
    const day = fireTimesBetween(cron('30 1 * * *', z), new Date('2026-11-01T00:00:00Z'), new Date('2026-11-02T00:00:00Z'), 10);
    expect(iso(day)).toEqual(['2026-11-01T05:30:00.000Z']); // 01:30 EDT, not 06:30Z (EST)
    expect(iso(fireTimesBetween(daily('2026-01-01 01:30:00', z), new Date('2026-11-01T00:00:00Z'), new Date('2026-11-02T00:00:00Z'), 10))).toEqual([
      '2026-11-01T05:30:00.000Z',
    ]);
    const hourly = fireTimesBetween(cron('0 * * * *', z), new Date('2026-11-01T03:59:59Z'), new Date('2026-11-02T04:59:59Z'), 100);
    expect(hourly).toHaveLength(25);
    expect(iso(hourly.slice(0, 4))).toEqual([
      '2026-11-01T04:00:00.000Z',
      '2026-11-01T05:00:00.000Z', // 01:00 EDT
      '2026-11-01T06:00:00.000Z', // 01:00 EST
      '2026-11-01T07:00:00.000Z',
    ]);
    expect(dayReadings(cron('*/15 * * * *', z), z, '2026-11-01')).toHaveLength(100);
    // Not every hour: the repeated 01:00 fires once.
    expect(dayReadings(cron('0 1,2 * * *', z), z, '2026-11-01')).toEqual(['2026-11-01 01:00:00', '2026-11-01 02:00:00']);
    expect(iso(fireTimesBetween(cron('0 1,2 * * *', z), new Date('2026-11-01T00:00:00Z'), new Date('2026-11-02T00:00:00Z'), 10))).toEqual([
      '2026-11-01T05:00:00.000Z',
      '2026-11-01T07:00:00.000Z',
    ]);
  });

  it('London, 2026-03-29 (01:00 GMT -> 02:00 BST): 01:30 fires at 02:30 BST; hourly fires 23 times', () => {
    const z = 'Europe/London';
    expect(nextFireTime(cron('30 1 * * *', z), new Date('2026-03-28T12:00:00Z'))!.toISOString()).toBe('2026-03-29T01:30:00.000Z');
    expect(local(z, nextFireTime(daily('2026-01-01 01:30:00', z), new Date('2026-03-28T12:00:00Z'))!)).toBe('2026-03-29 02:30:00');
    expect(dayReadings(cron('0 * * * *', z), z, '2026-03-29')).toEqual(['00:00:00', ...hours(2, 23)].map((h) => `2026-03-29 ${h}`));
  });

  it('London, 2026-10-25 (02:00 BST -> 01:00 GMT): 01:30 fires once, on BST; hourly fires 25 times', () => {
    const z = 'Europe/London';
    expect(iso(nextFireTimes(cron('30 1 * * *', z), new Date('2026-10-24T12:00:00Z'), 2))).toEqual([
      '2026-10-25T00:30:00.000Z',
      '2026-10-26T01:30:00.000Z',
    ]);
    expect(iso(nextFireTimes(daily('2026-01-01 01:30:00', z), new Date('2026-10-24T12:00:00Z'), 2))).toEqual([
      '2026-10-25T00:30:00.000Z',
      '2026-10-26T01:30:00.000Z',
    ]);
    const readings = dayReadings(cron('0 * * * *', z), z, '2026-10-25');
    expect(readings).toHaveLength(25);
    expect(readings.filter((r) => r === '2026-10-25 01:00:00')).toHaveLength(2);
  });

  it('Lord Howe, 2026-04-05 (02:00 +11 -> 01:30 +10:30): 01:45 fires once, at its first instant; */15 fires 98 times', () => {
    const z = 'Australia/Lord_Howe';
    expect(iso(nextFireTimes(cron('45 1 * * *', z), new Date('2026-04-04T00:00:00Z'), 2))).toEqual([
      '2026-04-04T14:45:00.000Z', // 01:45 +11 on Apr 5; the second 01:45 is 15:15Z
      '2026-04-05T15:15:00.000Z',
    ]);
    expect(iso(nextFireTimes(daily('2026-01-01 01:45:00', z), new Date('2026-04-04T00:00:00Z'), 1))).toEqual(['2026-04-04T14:45:00.000Z']);
    // An every-hour cron fires at both 01:30s and both 01:45s; no hh:00 repeats.
    const quarter = dayReadings(cron('*/15 * * * *', z), z, '2026-04-05');
    expect(quarter).toHaveLength(98);
    expect(quarter.filter((r) => r === '2026-04-05 01:45:00')).toHaveLength(2);
    expect(dayReadings(cron('0 * * * *', z), z, '2026-04-05')).toEqual(hours(0, 23).map((h) => `2026-04-05 ${h}`));
  });

  it('Lord Howe, 2026-10-04 (02:00 +10:30 -> 02:30 +11): 02:15 fires at 02:45, a 30-minute shift; never dropped', () => {
    const z = 'Australia/Lord_Howe';
    const next = nextFireTime(cron('15 2 * * *', z), new Date('2026-10-03T00:00:00Z'));
    expect(next!.toISOString()).toBe('2026-10-03T15:45:00.000Z');
    expect(local(z, next!)).toBe('2026-10-04 02:45:00');
    expect(local(z, nextFireTime(daily('2026-01-01 02:15:00', z), new Date('2026-10-03T00:00:00Z'))!)).toBe('2026-10-04 02:45:00');
    // 02:00 lands on 02:30, which is not otherwise an hourly time: still 24 fires.
    expect(dayReadings(cron('0 * * * *', z), z, '2026-10-04')).toEqual(
      ['00:00:00', '01:00:00', '02:30:00', ...hours(3, 23)].map((h) => `2026-10-04 ${h}`),
    );
    // 02:00 and 02:15 land on 02:30 and 02:45, which fire anyway.
    expect(dayReadings(cron('*/15 * * * *', z), z, '2026-10-04')).toHaveLength(94);
  });

  it('Kolkata (+05:30) and UTC have no DST: 24 hourly fires every day, all on the hour', () => {
    for (const z of ['Asia/Kolkata', 'UTC']) {
      for (const date of ['2026-03-08', '2026-03-29', '2026-04-05', '2026-10-04', '2026-10-25', '2026-11-01']) {
        expect(dayReadings(cron('0 * * * *', z), z, date)).toEqual(hours(0, 23).map((h) => `${date} ${h}`));
      }
    }
    expect(nextFireTime(cron('30 2 * * *', 'Asia/Kolkata'), new Date('2026-03-08T00:00:00Z'))!.toISOString()).toBe('2026-03-08T21:00:00.000Z');
    expect(nextFireTime(cron('30 2 * * *', 'UTC'), new Date('2026-03-08T00:00:00Z'))!.toISOString()).toBe('2026-03-08T02:30:00.000Z');
  });

  it('a window ending just after a fall-back still holds the first instant of a later-reading time', () => {
    // Until 01:10 EST, yet 01:30 EDT (05:30Z) is inside: it reads later than the window's end.
    expect(iso(fireTimesBetween(cron('30 1 * * *', 'America/New_York'), new Date('2026-11-01T05:00:00Z'), new Date('2026-11-01T06:10:00Z'), 5))).toEqual([
      '2026-11-01T05:30:00.000Z',
    ]);
    expect(iso(fireTimesBetween(cron('45 1 * * *', 'Australia/Lord_Howe'), new Date('2026-04-04T14:30:00Z'), new Date('2026-04-04T15:05:00Z'), 5))).toEqual([
      '2026-04-04T14:45:00.000Z',
    ]);
  });

  it('a daily recurrence starting on the second 01:30 of New York fires then, and at 01:30 after', () => {
    const start = new Date('2026-11-01T06:30:00Z'); // 01:30 EST, the repeat
    const spec: ScheduleSpec = { kind: 'recurrence', every: 1, unit: 'days', start, timezone: 'America/New_York' };
    expect(iso(nextFireTimes(spec, new Date('2026-11-01T00:00:00Z'), 2))).toEqual(['2026-11-01T06:30:00.000Z', '2026-11-02T06:30:00.000Z']);
  });

  it('Apia skipped 2011-12-30 whole: noon that day shifts 24 hours onto Dec 31 noon, which fires once', () => {
    const z = 'Pacific/Apia';
    const expected = ['2011-12-28 12:00:00', '2011-12-29 12:00:00', '2011-12-31 12:00:00', '2012-01-01 12:00:00'];
    const after = new Date('2011-12-27T23:00:00Z'); // Dec 27 13:00 local
    expect(nextFireTimes(cron('0 12 * * *', z), after, 4).map((t) => local(z, t))).toEqual(expected);
    expect(nextFireTimes(daily('2011-12-01 12:00:00', z), after, 4).map((t) => local(z, t))).toEqual(expected);
  });

  it('any split of the year into windows, and any nextFireTimes, agree with the whole-year walk', () => {
    const specs: [ScheduleSpec, string][] = [];
    for (const z of ['America/New_York', 'Australia/Lord_Howe', 'Europe/Berlin']) {
      specs.push([cron('*/15 * * * *', z), z], [cron('30 1,2 * * *', z), z], [daily('2026-01-01 02:15:00', z), z]);
    }
    for (const [spec, z] of specs) {
      const whole = simulateYear(spec, z);
      const { from, to } = year2026(z);
      // Windows of 5 h 17 min, ending anywhere, including inside gaps and repeats.
      const pieces: number[] = [];
      for (let a = from - 1; a < to - 1; a += 5 * HOUR + 17 * MINUTE) {
        const b = Math.min(a + 5 * HOUR + 17 * MINUTE, to - 1);
        pieces.push(...fireTimesBetween(spec, new Date(a), new Date(b), 1_000).map((d) => d.getTime()));
      }
      expect(iso(pieces)).toEqual(iso(whole));
      // Around each transition, from any minute: the next three are the walk's next three.
      for (const edge of ['2026-03-08T06:00:00Z', '2026-11-01T05:00:00Z', '2026-04-04T14:30:00Z', '2026-10-03T15:00:00Z', '2026-03-29T00:30:00Z', '2026-10-25T00:30:00Z']) {
        for (let t = Date.parse(edge) - 2 * HOUR; t <= Date.parse(edge) + 2 * HOUR; t += 7 * MINUTE) {
          expect(iso(nextFireTimes(spec, new Date(t), 3))).toEqual(iso(whole.filter((x) => x > t).slice(0, 3)));
        }
      }
    }
  });
});

// --- Month ends and leap years ----------------------------------------------

describe('calendar recurrences from month ends', () => {
  const monthly = (startReading: string, every: number, zone = 'Europe/Paris'): ScheduleSpec => ({
    kind: 'recurrence',
    every,
    unit: 'months',
    start: new Date(ruleInstants(zone, startReading)[0]!),
    timezone: zone,
  });

  it('monthly from 2027-01-31 09:00 Paris: the last day of each short month, back to the 31st after it, across 2027-2028', () => {
    const got = fireTimesBetween(monthly('2027-01-31 09:00:00', 1), new Date('2027-01-01T00:00:00Z'), new Date('2029-01-01T00:00:00Z'), 100);
    const days = ['31', '28', '31', '30', '31', '30', '31', '31', '30', '31', '30', '31'];
    const expected = [2027, 2028].flatMap((y) =>
      days.map((d, m) => `${y}-${String(m + 1).padStart(2, '0')}-${y === 2028 && m === 1 ? '29' : d} 09:00:00`),
    );
    expect(got.map((t) => local('Europe/Paris', t))).toEqual(expected);
  });

  it('monthly from Jan 30 and every 2 months from Dec 31: clamped per month, from the anchor', () => {
    expect(nextFireTimes(monthly('2028-01-30 09:00:00', 1), new Date('2028-01-01T00:00:00Z'), 4).map((t) => local('Europe/Paris', t))).toEqual([
      '2028-01-30 09:00:00',
      '2028-02-29 09:00:00',
      '2028-03-30 09:00:00',
      '2028-04-30 09:00:00',
    ]);
    expect(nextFireTimes(monthly('2027-12-31 09:00:00', 2), new Date('2027-12-01T00:00:00Z'), 5).map((t) => local('Europe/Paris', t))).toEqual([
      '2027-12-31 09:00:00',
      '2028-02-29 09:00:00',
      '2028-04-30 09:00:00',
      '2028-06-30 09:00:00',
      '2028-08-31 09:00:00',
    ]);
  });

  it('starting mid-series finds the right occurrence without walking from the anchor', () => {
    const spec = monthly('2027-01-31 09:00:00', 1);
    expect(nextFireTimes(spec, new Date('2028-06-15T00:00:00Z'), 3).map((t) => local('Europe/Paris', t))).toEqual([
      '2028-06-30 09:00:00',
      '2028-07-31 09:00:00',
      '2028-08-31 09:00:00',
    ]);
    // From exactly an occurrence: strictly after it.
    const feb29 = new Date(ruleInstants('Europe/Paris', '2028-02-29 09:00:00')[0]!);
    expect(local('Europe/Paris', nextFireTime(spec, feb29)!)).toBe('2028-03-31 09:00:00');
    expect(local('Europe/Paris', nextFireTime(spec, new Date(feb29.getTime() - 1))!)).toBe('2028-02-29 09:00:00');
    // Far in the future, still immediate.
    expect(local('Europe/Paris', nextFireTime(spec, new Date('2400-03-01T00:00:00Z'))!)).toBe('2400-03-31 09:00:00');
  });

  it('every 12 months from 2028-02-29: Feb 28 in common years, Feb 29 again in 2032', () => {
    const got = nextFireTimes(monthly('2028-02-29 12:00:00', 12, 'UTC'), new Date('2028-01-01T00:00:00Z'), 6);
    expect(iso(got)).toEqual([
      '2028-02-29T12:00:00.000Z',
      '2029-02-28T12:00:00.000Z',
      '2030-02-28T12:00:00.000Z',
      '2031-02-28T12:00:00.000Z',
      '2032-02-29T12:00:00.000Z',
      '2033-02-28T12:00:00.000Z',
    ]);
  });

  it('a monthly time in a gap shifts forward that month only', () => {
    // 02:30 on the 8th, New York: March 8 2026 has no 02:30.
    const spec = monthly('2026-01-08 02:30:00', 1, 'America/New_York');
    expect(nextFireTimes(spec, new Date('2026-01-01T00:00:00Z'), 4).map((t) => local('America/New_York', t))).toEqual([
      '2026-01-08 02:30:00',
      '2026-02-08 02:30:00',
      '2026-03-08 03:30:00',
      '2026-04-08 02:30:00',
    ]);
  });
});

// --- Cron details -----------------------------------------------------------

describe('cron expressions', () => {
  it('6 fields: seconds first', () => {
    const spec: ScheduleSpec = { kind: 'cron', cron: '*/20 * * * * *', timezone: 'UTC' };
    expect(iso(nextFireTimes(spec, new Date('2026-05-05T10:00:05Z'), 4))).toEqual([
      '2026-05-05T10:00:20.000Z',
      '2026-05-05T10:00:40.000Z',
      '2026-05-05T10:01:00.000Z',
      '2026-05-05T10:01:20.000Z',
    ]);
    expect(iso(nextFireTimes({ kind: 'cron', cron: '30 0 9 * * *', timezone: 'Europe/Berlin' }, new Date('2026-07-01T00:00:00Z'), 2))).toEqual([
      '2026-07-01T07:00:30.000Z',
      '2026-07-02T07:00:30.000Z',
    ]);
  });

  it('in UTC, matches cron-parser day for day: day-of-month OR day-of-week, L, #, names', () => {
    const from = new Date('2026-01-01T00:00:00Z');
    for (const expr of ['0 9 * * 1-5', '15 8 1,15 * 1', '0 0 L * *', '0 12 * * 5L', '0 6 * * 1#2', '0 9 * jan,jul thu', '*/7 3 */3 * *', '0 0 0 29 2 *']) {
      const ours = nextFireTimes({ kind: 'cron', cron: expr, timezone: 'UTC' }, from, 40);
      const theirs = CronExpressionParser.parse(expr, { tz: 'UTC', currentDate: from })
        .take(40)
        .map((d) => d.toDate());
      expect(iso(ours), expr).toEqual(iso(theirs));
      expect(ours, expr).toHaveLength(40);
    }
  });

  it('a sparse cron over a long window is bounded by the window, and found far ahead', () => {
    const spec: ScheduleSpec = { kind: 'cron', cron: '0 0 29 2 *', timezone: 'Europe/Berlin' };
    const started = performance.now();
    expect(fireTimesBetween(spec, new Date('2026-03-01T00:00:00Z'), new Date('2027-12-31T00:00:00Z'), 10)).toEqual([]);
    expect(iso(nextFireTimes(spec, new Date('2026-03-01T00:00:00Z'), 3))).toEqual([
      '2028-02-28T23:00:00.000Z',
      '2032-02-28T23:00:00.000Z',
      '2036-02-28T23:00:00.000Z',
    ]);
    expect(iso(nextFireTimes({ kind: 'cron', cron: '0 0 * 2 1#5', timezone: 'UTC' }, new Date('2026-01-01T00:00:00Z'), 1))).toEqual([
      '2044-02-29T00:00:00.000Z',
    ]);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('limit caps a dense cron over a long window', () => {
    const got = fireTimesBetween({ kind: 'cron', cron: '* * * * * *', timezone: 'America/New_York' }, new Date('2026-01-01T00:00:00Z'), new Date('2027-01-01T00:00:00Z'), 5);
    expect(iso(got)).toEqual(['01', '02', '03', '04', '05'].map((s) => `2026-01-01T00:00:${s}.000Z`));
    expect(fireTimesBetween({ kind: 'cron', cron: '0 * * * *', timezone: 'UTC' }, new Date('2026-01-01T00:00:00Z'), new Date('2027-01-01T00:00:00Z'), 0)).toEqual([]);
  });
});

// --- Validation ---------------------------------------------------------------

describe('validateSpec', () => {
  const paths = (spec: unknown) => validateSpec(spec as ScheduleSpec).map((p) => p.path);

  it('accepts valid specs', () => {
    expect(validateSpec({ kind: 'cron', cron: '0 9 * * mon-fri', timezone: 'Europe/Paris' })).toEqual([]);
    expect(validateSpec({ kind: 'cron', cron: '0 0 9 * * thu', timezone: 'Asia/Kolkata' })).toEqual([]);
    expect(validateSpec({ kind: 'interval', intervalSeconds: 1, anchor: new Date() })).toEqual([]);
    expect(validateSpec({ kind: 'recurrence', every: 3, unit: 'months', start: new Date(), timezone: 'UTC' })).toEqual([]);
    expect(validateSpec({ kind: 'once', at: new Date() })).toEqual([]);
  });

  it('names the cron field with the parser message, and refuses what cron-parser would fill in or randomize', () => {
    const bad = validateSpec({ kind: 'cron', cron: '61 * * * *', timezone: 'UTC' });
    expect(bad).toHaveLength(1);
    expect(bad[0]!.path).toBe('cron');
    expect(bad[0]!.message).toMatch(/61/);
    expect(validateSpec({ kind: 'cron', cron: '0 0 30 2 *', timezone: 'UTC' })[0]!.message).toMatch(/day of month/);
    for (const cron of ['', '   ', '* * *', '* * * *', '0 0 0 1 1 * 2026', 'H * * * *', 'every day', '@daily']) {
      expect(paths({ kind: 'cron', cron, timezone: 'UTC' }), JSON.stringify(cron)).toEqual(['cron']);
    }
    expect(paths({ kind: 'cron', cron: 42, timezone: 'UTC' })).toEqual(['cron']);
  });

  it('names the timezone for an unknown zone, next to a bad cron', () => {
    const problems = validateSpec({ kind: 'cron', cron: '0 9 * * *', timezone: 'Mars/Olympus_Mons' });
    expect(problems).toEqual([{ path: 'timezone', message: 'unknown time zone "Mars/Olympus_Mons"' }]);
    expect(paths({ kind: 'cron', cron: 'nope', timezone: 'Nowhere/City' })).toEqual(['cron', 'timezone']);
    expect(paths({ kind: 'recurrence', every: 1, unit: 'days', start: new Date(), timezone: '+05:00' })).toEqual(['timezone']);
    expect(paths({ kind: 'recurrence', every: 1, unit: 'days', start: new Date() })).toEqual(['timezone']);
  });

  it('names recurrence.every, recurrence.unit, recurrence.start, interval, anchor, at', () => {
    const rec = (o: object) => paths({ kind: 'recurrence', every: 1, unit: 'days', start: new Date(), timezone: 'UTC', ...o });
    expect(rec({ every: 0 })).toEqual(['recurrence.every']);
    expect(rec({ every: -2 })).toEqual(['recurrence.every']);
    expect(rec({ every: 1.5 })).toEqual(['recurrence.every']);
    expect(rec({ every: 1_201, unit: 'months' })).toEqual(['recurrence.every']);
    expect(rec({ unit: 'years' })).toEqual(['recurrence.unit']);
    expect(rec({ unit: 'seconds', every: 0 })).toEqual(['recurrence.unit', 'recurrence.every']);
    expect(rec({ start: new Date('nope') })).toEqual(['recurrence.start']);
    expect(paths({ kind: 'interval', intervalSeconds: 0, anchor: new Date() })).toEqual(['interval']);
    expect(paths({ kind: 'interval', intervalSeconds: 0.5, anchor: new Date() })).toEqual(['interval']);
    expect(paths({ kind: 'interval', intervalSeconds: 60, anchor: new Date(Number.NaN) })).toEqual(['anchor']);
    expect(paths({ kind: 'once', at: new Date('never') })).toEqual(['at']);
    expect(paths({ kind: 'weekly' })).toEqual(['kind']);
  });

  it('fireTimesBetween refuses an invalid spec with the same details', () => {
    const call = () => fireTimesBetween({ kind: 'recurrence', every: 0, unit: 'days', start: new Date(), timezone: 'UTC' }, new Date(0), new Date(), 1);
    expect(call).toThrow(AppError);
    try {
      call();
    } catch (e) {
      expect((e as AppError).code).toBe('invalid_request');
      expect((e as AppError).details).toEqual([{ path: 'recurrence.every', message: 'must be an integer from 1 to 36525' }]);
    }
    expect(() => fireTimesBetween({ kind: 'once', at: new Date() }, new Date(0), new Date(), -1)).toThrow(RangeError);
  });
});

// --- next*, once, intervals ---------------------------------------------------

describe('nextFireTimes, nextFireTime, once and interval', () => {
  it('nextFireTimes is strictly after and capped by count', () => {
    const spec: ScheduleSpec = { kind: 'cron', cron: '0 9 * * *', timezone: 'UTC' };
    expect(iso(nextFireTimes(spec, new Date('2026-05-05T09:00:00Z'), 3))).toEqual([
      '2026-05-06T09:00:00.000Z',
      '2026-05-07T09:00:00.000Z',
      '2026-05-08T09:00:00.000Z',
    ]);
    expect(nextFireTime(spec, new Date('2026-05-05T08:59:59.999Z'))!.toISOString()).toBe('2026-05-05T09:00:00.000Z');
    expect(nextFireTimes(spec, new Date(), 0)).toEqual([]);
  });

  it('fireTimesBetween is (after, until]', () => {
    const spec: ScheduleSpec = { kind: 'cron', cron: '0 9 * * *', timezone: 'UTC' };
    expect(iso(fireTimesBetween(spec, new Date('2026-05-05T09:00:00Z'), new Date('2026-05-07T09:00:00Z'), 10))).toEqual([
      '2026-05-06T09:00:00.000Z',
      '2026-05-07T09:00:00.000Z',
    ]);
    expect(fireTimesBetween(spec, new Date('2026-05-07T09:00:00Z'), new Date('2026-05-05T09:00:00Z'), 10)).toEqual([]);
  });

  it('once fires once, at `at`', () => {
    const at = new Date('2026-05-05T12:34:56.789Z');
    const spec: ScheduleSpec = { kind: 'once', at };
    expect(nextFireTime(spec, new Date(at.getTime() - 1))).toEqual(at);
    expect(nextFireTime(spec, at)).toBeNull();
    expect(nextFireTimes(spec, new Date(0), 5)).toEqual([at]);
    expect(fireTimesBetween(spec, new Date(at.getTime() - 1000), at, 5)).toEqual([at]);
    expect(fireTimesBetween(spec, new Date(at.getTime() - 1000), new Date(at.getTime() - 1), 5)).toEqual([]);
  });

  it('interval fires at anchor + k*N, k >= 0, whatever the window', () => {
    const anchor = new Date('2026-01-01T00:00:07Z');
    const spec: ScheduleSpec = { kind: 'interval', intervalSeconds: 3600, anchor };
    expect(nextFireTime(spec, new Date('2026-05-05T12:34:56Z'))!.toISOString()).toBe('2026-05-05T13:00:07.000Z');
    expect(nextFireTime(spec, new Date('2026-05-05T13:00:07Z'))!.toISOString()).toBe('2026-05-05T14:00:07.000Z');
    expect(nextFireTime(spec, new Date('2025-06-01T00:00:00Z'))).toEqual(anchor); // before the anchor: the anchor
    expect(fireTimesBetween(spec, new Date('2026-01-01T00:00:00Z'), new Date('2026-01-02T00:00:00Z'), 100)).toHaveLength(24);
    expect(nextFireTime(spec, new Date('9999-01-01T00:00:00Z'))!.toISOString()).toBe('9999-01-01T00:00:07.000Z');
  });

  it('interval far from its anchor: the float division does not skip the next occurrence', () => {
    // (after - anchor) / 3000 rounds up to a whole number here.
    const spec: ScheduleSpec = { kind: 'interval', intervalSeconds: 3, anchor: new Date(-8.64e15) };
    expect(nextFireTime(spec, new Date(6_359_999_999_999_999))!.getTime()).toBe(6_360_000_000_000_000);
    expect(nextFireTime(spec, new Date(6_360_000_000_000_000))!.getTime()).toBe(6_360_000_000_003_000);
  });

  it('interval and minute recurrences are elapsed time across DST', () => {
    const daily: ScheduleSpec = { kind: 'interval', intervalSeconds: 86_400, anchor: new Date('2026-03-07T14:00:00Z') };
    expect(nextFireTimes(daily, new Date('2026-03-07T00:00:00Z'), 3).map((t) => local('America/New_York', t))).toEqual([
      '2026-03-07 09:00:00',
      '2026-03-08 10:00:00',
      '2026-03-09 10:00:00',
    ]);
    const ninety: ScheduleSpec = { kind: 'recurrence', every: 90, unit: 'minutes', start: new Date('2026-11-01T04:00:00Z'), timezone: 'America/New_York' };
    const got = nextFireTimes(ninety, new Date('2026-11-01T00:00:00Z'), 4);
    expect(iso(got)).toEqual(['2026-11-01T04:00:00.000Z', '2026-11-01T05:30:00.000Z', '2026-11-01T07:00:00.000Z', '2026-11-01T08:30:00.000Z']);
    expect(got.map((t) => local('America/New_York', t).slice(11))).toEqual(['00:00:00', '01:30:00', '02:00:00', '03:30:00']);
  });
});
