// Recurrence maths: when a schedule fires. Pure (no I/O, no clock), so the
// materializer and the API previews compute the very same instants.
//
// Kinds of schedule:
// - cron: a 5-field expression (minute hour day-of-month month day-of-week),
//   or 6 with seconds first, parsed by cron-parser and read on the wall clock
//   of `timezone` (an IANA name). Hashed values (`H`) are refused: without a
//   per-schedule seed they would differ between isolates.
// - interval: every N seconds (1 <= N, an integer) of elapsed time, at
//   anchor + k*N for k >= 0. No calendar, no time zone.
// - recurrence: every N (1 <= N, an integer) `minutes`, `hours`, `days`,
//   `weeks` or `months`; the first occurrence is `start` itself.
//   `minutes` and `hours` are elapsed time (start + k*N exactly). `days`,
//   `weeks` and `months` are calendar steps on the wall clock of `timezone`,
//   and the k-th occurrence is computed from `start`, never from the previous
//   one: monthly from Jan 31 fires Jan 31, Feb 28 (29 in a leap year), Mar 31,
//   Apr 30, ...; daily at 09:00 Europe/Paris stays at 09:00 local across DST.
// - once: fires at `at`, once.
// A step is at most 100 years, which keeps every instant inside JS Dates.
//
// Daylight saving time (every wall-clock rule: cron, days, weeks, months):
// - A local time that does not exist (the clock springs forward over it)
//   fires at the same offset after the gap, i.e. shifted forward by the gap's
//   length: 02:30 on 2026-03-08 in America/New_York fires at 03:30 EDT; 02:15
//   on 2026-10-04 in Australia/Lord_Howe (a 30-minute gap) fires at 02:45.
//   A day is never dropped.
// - A local time that occurs twice (the clock falls back over it) fires once,
//   at its first occurrence (the earlier instant, still on summer time).
//   Exception: a cron expression whose hour field matches every hour
//   (`0 * * * *`, `*/15 * * * *`) fires at both instants of the repeated
//   times, since they are different real hours: it keeps its elapsed rhythm.
// - Local times that map to the same instant (02:30 shifted to 03:30, and
//   03:30 itself) fire once.
//
// cron-parser parses cron expressions and decides which days match (with
// its rules for day-of-month OR day-of-week, L and #), but the walk and the
// mapping to instants are ours: we step over the "wall-clock axis" (local
// times written as if they were UTC, where there are no gaps or repeats) and
// turn each local time into instants with the one function every kind shares
// (`wallToInstants`). cron-parser's own time-zone walk follows a different
// rule: it drops a day whose time falls in a gap shorter than an hour
// (02:15 on 2026-10-04 in Australia/Lord_Howe never fires), and its iterator
// costs ~15 µs a step.
import { CronExpressionParser, type CronExpression } from 'cron-parser';
import { IANAZone } from 'luxon';
import { createLru } from '../cache.ts';
import { RECURRENCE_UNITS, type RecurrenceUnit, type Schedule } from '../db/sql/scheduleRows.ts';
import { invalid, type ErrorDetail } from '../errors.ts';


export type ScheduleSpec =
  /** 5 fields, or 6 with seconds first. */
  | { kind: 'cron'; cron: string; timezone: string }
  /** Fires at anchor + k*intervalSeconds, k >= 0. */
  | { kind: 'interval'; intervalSeconds: number; anchor: Date }
  /** The k-th occurrence is start + k*every units (k >= 0). */
  | { kind: 'recurrence'; every: number; unit: RecurrenceUnit; start: Date; timezone: string }
  | { kind: 'once'; at: Date };

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
/** The largest instant a Date can hold. */
const MAX_TIME = 8.64e15;

/** The schedules' interval_seconds column is an integer: about 68 years (more is a typo anyway). */
export const MAX_INTERVAL_SECONDS = 2_147_483_647;
/** 100 years in each unit: a larger step is a typo, and would leave the Date range. */
export const MAX_EVERY: Readonly<Record<RecurrenceUnit, number>> = {
  minutes: 52_596_000,
  hours: 876_600,
  days: 36_525,
  weeks: 5_217,
  months: 1_200,
};

/** Problems with a spec as {path, message} pairs, path naming the API field; [] when valid. */
export function validateSpec(spec: ScheduleSpec): ErrorDetail[] {
  // Defensive about shape as well: specs also arrive from stored rows.
  const s: Partial<Record<string, unknown>> = typeof spec === 'object' && spec !== null ? spec : {};
  switch (s.kind) {
    case 'cron': {
      const problems: ErrorDetail[] = [];
      const cron = typeof s.cron === 'string' ? compileCron(s.cron) : 'must be a string';
      if (typeof cron === 'string') problems.push({ path: 'cron', message: cron });
      problems.push(...checkZone(s.timezone));
      return problems;
    }
    case 'interval': {
      const problems: ErrorDetail[] = [];
      if (!isIntegerIn(s.intervalSeconds, 1, MAX_INTERVAL_SECONDS)) {
        problems.push({ path: 'interval', message: `must be an integer number of seconds from 1 to ${MAX_INTERVAL_SECONDS}` });
      }
      if (!isValidDate(s.anchor)) problems.push({ path: 'anchor', message: 'must be a valid instant' });
      return problems;
    }
    case 'recurrence': {
      const problems: ErrorDetail[] = [];
      const unit = s.unit;
      const knownUnit = typeof unit === 'string' && (RECURRENCE_UNITS as readonly string[]).includes(unit);
      if (!knownUnit) problems.push({ path: 'recurrence.unit', message: `must be one of ${RECURRENCE_UNITS.join(', ')}` });
      const max = knownUnit ? MAX_EVERY[unit as RecurrenceUnit] : Number.MAX_SAFE_INTEGER;
      if (!isIntegerIn(s.every, 1, max)) problems.push({ path: 'recurrence.every', message: `must be an integer from 1 to ${max}` });
      if (!isValidDate(s.start)) problems.push({ path: 'recurrence.start', message: 'must be a valid instant' });
      problems.push(...checkZone(s.timezone));
      return problems;
    }
    case 'once':
      return isValidDate(s.at) ? [] : [{ path: 'at', message: 'must be a valid instant' }];
    default:
      return [{ path: 'kind', message: 'must be one of cron, interval, recurrence, once' }];
  }
}

/**
 * Up to `limit` fire times t with after < t <= until, ascending, no duplicates.
 * Throws invalid_request (with the details of validateSpec) on an invalid spec.
 */
export function fireTimesBetween(spec: ScheduleSpec, after: Date, until: Date, limit: number): Date[] {
  if (!Number.isSafeInteger(limit) || limit < 0) throw new RangeError(`limit must be a non-negative integer, got ${limit}`);
  const from = after.getTime();
  const to = Math.min(until.getTime(), MAX_TIME);
  if (Number.isNaN(from) || Number.isNaN(to)) throw new RangeError('after and until must be valid dates');
  const problems = validateSpec(spec);
  if (problems.length > 0) {
    throw invalid(`invalid schedule: ${problems.map((p) => `${p.path}: ${p.message}`).join('; ')}`, problems);
  }
  if (limit === 0 || to <= from) return [];
  let times: number[];
  switch (spec.kind) {
    case 'cron':
      times = cronTimes(compileCron(spec.cron) as CompiledCron, zoneFor(spec.timezone)!, from, to, limit);
      break;
    case 'interval':
      times = elapsedTimes(spec.anchor.getTime(), spec.intervalSeconds * SECOND, from, to, limit);
      break;
    case 'recurrence':
      times =
        spec.unit === 'minutes' || spec.unit === 'hours'
          ? elapsedTimes(spec.start.getTime(), spec.every * (spec.unit === 'minutes' ? MINUTE : HOUR), from, to, limit)
          : calendarTimes(spec, zoneFor(spec.timezone)!, from, to, limit);
      break;
    case 'once': {
      const at = spec.at.getTime();
      times = at > from && at <= to ? [at] : [];
      break;
    }
  }
  return times.map((t) => new Date(t));
}

/** The next `count` fire times strictly after `after` (fewer if the schedule ends). */
export function nextFireTimes(spec: ScheduleSpec, after: Date, count: number): Date[] {
  return fireTimesBetween(spec, after, new Date(MAX_TIME), count);
}

/** The first fire time strictly after `after`, or null if there is none (a past one-shot). */
export function nextFireTime(spec: ScheduleSpec, after: Date): Date | null {
  return nextFireTimes(spec, after, 1)[0] ?? null;
}

// ---------------------------------------------------------------------------
// Elapsed time: interval, minutes, hours.

function elapsedTimes(anchor: number, step: number, after: number, until: number, limit: number): number[] {
  // Straight to the first k with anchor + k*step > after: no walk from the
  // anchor, whatever its age. The float division can be one off, hence the nudges.
  let k = after < anchor ? 0 : Math.floor((after - anchor) / step) + 1;
  if (k > 0 && anchor + (k - 1) * step > after) k -= 1;
  if (anchor + k * step <= after) k += 1;
  const out: number[] = [];
  for (; out.length < limit; k++) {
    const t = anchor + k * step;
    if (t > until) break;
    out.push(t);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Calendar recurrences: days, weeks, months on the wall clock.

function calendarTimes(
  spec: Extract<ScheduleSpec, { kind: 'recurrence' }>,
  zone: Zone,
  after: number,
  until: number,
  limit: number,
): number[] {
  const start = spec.start.getTime();
  const wall = new Date(start + zone.offset(start));
  const year = wall.getUTCFullYear();
  const month = wall.getUTCMonth();
  const day = wall.getUTCDate();
  const timeOfDay = wall.getTime() - utcDate(year, month, day);
  const wallAt =
    spec.unit === 'months'
      ? (k: number) => {
          // From the anchor, not the previous occurrence: the day is clamped
          // to each month's length without ever shrinking for good.
          const m = month + k * spec.every;
          const y = year + Math.floor(m / 12);
          const mm = m - 12 * Math.floor(m / 12);
          return utcDate(y, mm, Math.min(day, daysInMonth(y, mm))) + timeOfDay;
        }
      : (k: number) => utcDate(year, month, day + k * spec.every * (spec.unit === 'weeks' ? 7 : 1)) + timeOfDay;
  // k = 0 is start itself, even when start is the second of two instants
  // that share its wall-clock time.
  const at = (k: number) => (k === 0 ? start : firstInstant(zone, wallAt(k)));

  // Estimate k from elapsed time, then nudge: a DST shift or a month's
  // length moves an occurrence by far less than one step.
  const approxStep = spec.every * (spec.unit === 'months' ? 30.436875 * DAY : spec.unit === 'weeks' ? 7 * DAY : DAY);
  let k = after < start ? 0 : Math.max(0, Math.floor((after - start) / approxStep));
  while (k > 0 && at(k - 1) > after) k -= 1;
  while (at(k) <= after) k += 1;
  const out: number[] = [];
  for (; out.length < limit; k++) {
    const t = at(k);
    if (!(t <= until)) break; // also stops on NaN, past the Date range
    // Two days can meet on one instant when a zone skips a whole day
    // (Pacific/Apia, 2011-12-30): the shifted one and the next fire once.
    if (t > (out.at(-1) ?? after)) out.push(t);
  }
  return out;
}

/** Milliseconds of a UTC calendar date; unlike Date.UTC, years 0-99 are not taken as 19xx. */
function utcDate(year: number, month: number, day: number): number {
  return new Date(0).setUTCFullYear(year, month, day);
}

function daysInMonth(year: number, month: number): number {
  return new Date(utcDate(year, month + 1, 0)).getUTCDate();
}

// ---------------------------------------------------------------------------
// Cron.

interface CompiledCron {
  /** Ascending field values; months 1-12. */
  seconds: readonly number[];
  minutes: readonly number[];
  hours: readonly number[];
  months: ReadonlySet<number>;
  /** Whether the day starting at `day` (wall-clock axis) matches the day-of-month and day-of-week fields. */
  matchesDay(day: number): boolean;
  /** The hour field matches every hour: repeated local times fire at both instants. */
  everyHour: boolean;
}

// Parsing costs far more than walking a one-day window, and the materializer
// asks about the same few expressions for thousands of schedules per tick.
// Errors are cached too (as their message). Keyed by user input, so bounded:
// least recently used out first.
const CRON_CACHE_SIZE = 2_000;
const cronCache = createLru<string, CompiledCron | string>(CRON_CACHE_SIZE);
/** Any fixed instant: a cron that cannot fire after it within cron-parser's loop limit never fires. */
const CRON_PROBE_FROM = new Date(Date.UTC(2000, 0, 1));
/** The Gregorian calendar repeats every 400 years: a walk that finds nothing in as long never will. */
const CALENDAR_CYCLE = 146_097 * DAY;

/** The parsed expression, or why it is invalid. */
function compileCron(expression: string): CompiledCron | string {
  const cached = cronCache.get(expression);
  if (cached !== undefined) return cached;
  const compiled = parseCron(expression);
  cronCache.set(expression, compiled);
  return compiled;
}

function parseCron(expression: string): CompiledCron | string {
  const raw = expression.trim().split(/\s+/);
  // cron-parser fills missing fields with defaults (even for an empty
  // string: every minute), so a truncated expression would silently mean
  // something else.
  if (expression.trim() === '' || (raw.length !== 5 && raw.length !== 6)) {
    return 'must have 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first';
  }
  // Month and weekday names (`thu`) are replaced before H is read.
  if (raw.some((f, i) => (i >= raw.length - 2 ? f.replace(/[a-z]{3}/gi, '') : f).includes('H'))) {
    return 'hashed values (H) are not supported';
  }
  let parsed: CronExpression;
  try {
    parsed = CronExpressionParser.parse(expression, { tz: 'UTC', currentDate: CRON_PROBE_FROM });
    // The parser refuses Feb 30, but not every expression that never fires;
    // the probe turns one into an error now rather than a silent schedule.
    parsed.next();
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
  const { fields } = parsed;
  const numbers = (values: readonly unknown[]) => [...new Set(values.filter((v) => typeof v === 'number'))].sort((a, b) => a - b);
  const seconds = numbers(fields.second.values);
  const minutes = numbers(fields.minute.values);
  const hours = numbers(fields.hour.values);
  const anyDay = fields.dayOfMonth.isWildcard && fields.dayOfWeek.isWildcard;
  // A probe at the day's first matching time of day leaves only the day
  // fields to decide, with cron-parser's own rules (OR of day-of-month and
  // day-of-week when both are restricted, L, #).
  const firstTime = hours[0]! * HOUR + minutes[0]! * MINUTE + seconds[0]! * SECOND;
  return {
    seconds,
    minutes,
    hours,
    months: new Set(numbers(fields.month.values)),
    matchesDay: anyDay ? () => true : (day) => parsed.includesDate(new Date(day + firstTime)),
    everyHour: hours.length === 24,
  };
}

function cronTimes(cron: CompiledCron, zone: Zone, after: number, until: number, limit: number): number[] {
  // The wall-clock times whose instants can fall in (after, until]: the
  // window's ends on the wall clock, widened by the DST shift near each end.
  const wallFrom = Math.max(-MAX_TIME, after + zone.offset(after) - zone.shiftNear(after));
  const wallTo = Math.min(MAX_TIME, until + zone.offset(until) + zone.shiftNear(until));
  // The walk is ours, day by day on the wall-clock axis (local times written
  // as UTC, where days have no gaps or repeats), with cron-parser deciding
  // which days match. Its iterator does luxon arithmetic at ~15 µs a step: a
  // daily cron over a one-day window took 79 µs a call with it, 12 µs so.
  // And this walk cannot run past the window.
  const found = new Set<number>();
  let stopAfterWall = Infinity;
  let day = Math.floor(wallFrom / DAY) * DAY;
  walk: while (day <= wallTo) {
    if (found.size === 0 && day > wallFrom + CALENDAR_CYCLE) break; // nextFireTimes of an expression that never fires
    const date = new Date(day);
    if (!cron.months.has(date.getUTCMonth() + 1)) {
      day = utcDate(date.getUTCFullYear(), date.getUTCMonth() + 1, 1);
      continue;
    }
    if (cron.matchesDay(day)) {
      for (const h of cron.hours) {
        const hourStart = day + h * HOUR;
        if (hourStart + HOUR <= wallFrom) continue;
        for (const m of cron.minutes) {
          const minuteStart = hourStart + m * MINUTE;
          if (minuteStart + MINUTE <= wallFrom) continue;
          for (const s of cron.seconds) {
            const wall = minuteStart + s * SECOND;
            if (wall < wallFrom) continue;
            if (wall > wallTo || wall > stopAfterWall) break walk;
            for (const t of cron.everyHour ? wallToInstantsShifted(zone, wall) : [firstInstant(zone, wall)]) {
              if (t > after && t <= until) found.add(t);
            }
            // Instants follow wall-clock order except within a DST shift of
            // each other, so once `limit` are found, walking one shift
            // further finds every earlier instant still missing.
            if (found.size >= limit && stopAfterWall === Infinity) stopAfterWall = wall + zone.shiftNear(wall);
          }
        }
      }
    }
    day += DAY;
  }
  return [...found].sort((a, b) => a - b).slice(0, limit);
}

// ---------------------------------------------------------------------------
// Time zones: the single place where wall-clock times become instants.

interface Zone {
  /** Offset from UTC in milliseconds at instant t (local = t + offset). */
  offset(t: number): number;
  /** How far offsets differ within a few days of t: 0 away from any transition. */
  shiftNear(t: number): number;
}

// Zones are cached by canonical name only (a few hundred exist), each spelling
// a user sends maps to one in a small cache of its own: 3,000 spellings of
// Europe/Paris are one zone, not 3,000 (luxon's own caches are keyed by the
// name it is given, so it only ever sees canonical names too).
const ZONE_CACHE_SIZE = 128;
const SPELLING_CACHE_SIZE = 512;
const zones = createLru<string, Zone>(ZONE_CACHE_SIZE);
const spellings = createLru<string, string | null>(SPELLING_CACHE_SIZE);
// Offsets are cached per hour: Intl costs ~5 µs a call, and a tick asks for
// the same few hours across thousands of schedules. An hour whose two ends
// agree has one offset throughout (no zone changes offset twice in an hour).
const ZONE_CACHE_HOURS = 4_096;
const OFFSET_LIMIT = MAX_TIME - 30 * DAY;

function checkZone(timezone: unknown): ErrorDetail[] {
  if (typeof timezone !== 'string') return [{ path: 'timezone', message: 'must be an IANA time zone name' }];
  return zoneFor(timezone) ? [] : [{ path: 'timezone', message: `unknown time zone "${timezone}"` }];
}

/**
 * The canonical spelling of an IANA zone name (`eUrOpE/pArIs` is
 * `Europe/Paris`), or undefined when it is not one: Intl's resolved name.
 * Schedules store this. Recent V8 (workerd) only normalizes the case; the
 * older ICU of Node 22 also replaces a few links by their target
 * (`Asia/Kolkata` by `Asia/Calcutta`, `Etc/UTC` by `UTC`): the same zone.
 */
export function canonicalZoneName(name: string): string | undefined {
  let canonical = spellings.get(name);
  if (canonical === undefined) {
    canonical = null;
    // Intl (Node 22, recent workerd) also takes offsets such as "+05:00";
    // they are not zone names and would freeze a schedule outside DST.
    if (/^[A-Za-z]/.test(name) && name.length <= 64) {
      try {
        canonical = new Intl.DateTimeFormat('en-US', { timeZone: name }).resolvedOptions().timeZone;
      } catch {
        canonical = null;
      }
    }
    spellings.set(name, canonical);
  }
  return canonical ?? undefined;
}

/** How many entries each cache keyed by user input holds (tests check the bounds). */
export function recurrenceCacheSizes(): { crons: number; zones: number; spellings: number } {
  return { crons: cronCache.size, zones: zones.size, spellings: spellings.size };
}

/** The zone, or undefined for a name Intl does not know. Only valid zones are cached, by canonical name. */
function zoneFor(spelling: string): Zone | undefined {
  const name = canonicalZoneName(spelling);
  if (!name) return undefined;
  const cached = zones.get(name);
  if (cached) return cached;
  if (!IANAZone.isValidZone(name)) return undefined;
  const iana = IANAZone.create(name);
  const byHour = new Map<number, number>();
  const offset = (time: number): number => {
    // Intl cannot format the last days of the Date range, which an open
    // window's end (nextFireTimes) reaches; the offset there is moot.
    const t = Math.min(Math.max(time, -OFFSET_LIMIT), OFFSET_LIMIT);
    const hour = Math.floor(t / HOUR);
    const known = byHour.get(hour);
    if (known !== undefined) return known;
    const first = iana.offset(hour * HOUR) * MINUTE;
    if (first !== iana.offset(hour * HOUR + HOUR - SECOND) * MINUTE) return iana.offset(t) * MINUTE;
    if (byHour.size >= ZONE_CACHE_HOURS) byHour.clear();
    byHour.set(hour, first);
    return first;
  };
  const zone: Zone = {
    offset,
    // Four days either side covers every instant whose local time lies
    // within a day of t; transitions are weeks apart, so at most one is seen.
    shiftNear: (t) => {
      const a = offset(t - 4 * DAY);
      const b = offset(t);
      const c = offset(t + 4 * DAY);
      return Math.max(a, b, c) - Math.min(a, b, c);
    },
  };
  zones.set(name, zone);
  return zone;
}

/**
 * Every instant whose local time in `zone` reads `wall` (milliseconds on the
 * wall-clock axis): one normally, two in a repeated hour (ascending), none in
 * a gap.
 */
function wallToInstants(zone: Zone, wall: number): number[] {
  // Any instant reading `wall` lies within 14 hours of it, so the offsets a
  // day either side are the two that can apply (they are equal away from a
  // transition).
  const before = zone.offset(wall - DAY);
  const after = zone.offset(wall + DAY);
  const out: number[] = [];
  if (zone.offset(wall - before) === before) out.push(wall - before);
  if (after !== before && zone.offset(wall - after) === after) out.push(wall - after);
  return out.sort((a, b) => a - b);
}

/** Where a wall-clock time in a gap fires: at the offset before the gap, i.e. shifted forward by its length. */
function shiftedPastGap(zone: Zone, wall: number): number {
  return wall - zone.offset(wall - DAY);
}

/** The default rule: a gap shifts forward, a repeated time fires at its first instant. */
function firstInstant(zone: Zone, wall: number): number {
  return wallToInstants(zone, wall)[0] ?? shiftedPastGap(zone, wall);
}

/** The every-hour cron rule: a gap shifts forward, a repeated time fires at both instants. */
function wallToInstantsShifted(zone: Zone, wall: number): number[] {
  const instants = wallToInstants(zone, wall);
  return instants.length > 0 ? instants : [shiftedPastGap(zone, wall)];
}

function isIntegerIn(value: unknown, min: number, max: number): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max;
}

function isValidDate(value: unknown): value is Date {
  return value instanceof Date && !Number.isNaN(value.getTime());
}

/** The recurrence maths' view of a schedule. */
export function specOf(s: Pick<Schedule, 'kind' | 'cron' | 'timezone' | 'intervalSeconds' | 'recurrenceEvery' | 'recurrenceUnit' | 'anchor' | 'fireAt'>): ScheduleSpec {
  switch (s.kind) {
    case 'cron':
      return { kind: 'cron', cron: s.cron!, timezone: s.timezone };
    case 'interval':
      return { kind: 'interval', intervalSeconds: s.intervalSeconds!, anchor: s.anchor! };
    case 'recurrence':
      return { kind: 'recurrence', every: s.recurrenceEvery!, unit: s.recurrenceUnit!, start: s.anchor!, timezone: s.timezone };
    case 'once':
      return { kind: 'once', at: s.fireAt! };
  }
}
