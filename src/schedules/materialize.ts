// Materialization (DESIGN §5.2): due schedules become occurrence tasks.
//
// A bounded batch of due schedules is locked (SKIP LOCKED), each one's fire
// times up to now plus the look-ahead are computed here, and one statement
// writes every occurrence (unique per schedule and fire time) and advances
// every schedule's next_run_at and last_fired_at. A cut anywhere rolls the
// batch back whole; overlapping sweeps take disjoint batches, and even a
// repeated batch writes each fire time once.
//
// Misfire policy, for fire times found later than the grace period (the
// service was down, the schedule paused, a sweep cut off):
// - run_once (default): the latest late time fires, once; earlier late times
//   are dropped.
// - catch_up: the late times fire, the latest `catchUpLimit` of them.
// - skip: the latest `catchUpLimit` late times are recorded as `missed`
//   occurrences; none fires.
// Times within the grace period are on time and fire under every policy.
// Overlap policy `skip`: while an earlier occurrence has not finished, a fire
// time is recorded as `missed` instead; at most one occurrence is
// outstanding. Such schedules are materialized when due, without look-ahead.
import type { Config } from '../config.ts';
import type { Db } from '../db/seam.ts';
import { fireOccurrences, lockDueSchedules, type Occurrence, type ScheduleAdvance } from '../db/sql/schedules.ts';
import type { Logger } from '../log.ts';
import type { Schedule } from '../db/sql/scheduleRows.ts';
import { specOf } from './recurrence.ts';
import { fireTimesBetween, nextFireTime, type ScheduleSpec } from './recurrence.ts';

/** Most occurrences one schedule writes per materialization (the rest follow next tick). */
export const MAX_OCCURRENCES_PER_SCHEDULE = 1000;

/** The last `count` fire times t with after < t <= until, ascending; windows widen backwards from `until`. */
export function lastFireTimes(spec: ScheduleSpec, after: Date, until: Date, count: number): Date[] {
  if (count <= 0 || until <= after) return [];
  for (let span = 60_000; ; span *= 8) {
    const from = new Date(Math.max(after.getTime(), until.getTime() - span));
    const times = fireTimesBetween(spec, from, until, Number.MAX_SAFE_INTEGER);
    if (times.length >= count || from.getTime() === after.getTime()) return times.slice(-count);
  }
}

export interface Plan {
  occurrences: Occurrence[];
  advance: ScheduleAdvance;
}

/** Decides one due schedule's occurrences at `now` (the database clock). Pure. */
export function planOccurrences(s: Schedule, busy: boolean, now: Date, lookaheadSeconds: number): Plan {
  const spec = specOf(s);
  const after = new Date(s.nextRunAt!.getTime() - 1);
  const windowEnd = new Date(now.getTime() + (s.overlap === 'skip' ? 0 : lookaheadSeconds * 1000));
  // A time at or after this instant is on time; before it, late.
  const onTimeFrom = new Date(now.getTime() - s.misfireGraceSeconds * 1000);

  const late = s.nextRunAt! < onTimeFrom ? lastFireTimes(spec, after, new Date(onTimeFrom.getTime() - 1), s.catchUpLimit) : [];
  const onTimeAfter = new Date(Math.max(after.getTime(), onTimeFrom.getTime() - 1));
  const onTime = fireTimesBetween(spec, onTimeAfter, windowEnd, MAX_OCCURRENCES_PER_SCHEDULE);

  const occurrences: Occurrence[] = [];
  const missed = (t: Date, note: string) => occurrences.push({ scheduleId: s.id, scheduledFor: t, status: 'missed', note });
  let toFire: Date[];
  switch (s.misfire) {
    case 'run_once':
      toFire = [...late.slice(-1), ...onTime];
      break;
    case 'catch_up':
      toFire = [...late, ...onTime];
      break;
    case 'skip':
      for (const t of late) missed(t, 'missed: found late, and the misfire policy is skip');
      toFire = onTime;
      break;
  }
  let outstanding = busy;
  for (const t of toFire) {
    if (s.overlap === 'skip' && outstanding) {
      missed(t, 'missed: the previous run had not finished, and the overlap policy is skip');
      continue;
    }
    occurrences.push({ scheduleId: s.id, scheduledFor: t, status: 'scheduled', note: null });
    outstanding = true;
  }

  const truncated = onTime.length === MAX_OCCURRENCES_PER_SCHEDULE;
  const resumeAfter = truncated ? onTime.at(-1)! : windowEnd;
  const fired = occurrences.filter((o) => o.status === 'scheduled').at(-1)?.scheduledFor ?? null;
  return { occurrences, advance: { id: s.id, nextRunAt: nextFireTime(spec, resumeAfter), lastFiredAt: fired } };
}

export interface MaterializeCounts {
  schedules: number;
  fired: number;
  missed: number;
  budgetExhausted: boolean;
}

export interface MaterializeDeps {
  db: Db;
  config: Config;
  log: Logger;
}

/** Materializes due schedules in bounded batches until none is due or the deadline passes. */
export async function materializeDueSchedules(
  deps: MaterializeDeps,
  options: { now?: Date; deadline: number; elapsed: () => number },
): Promise<MaterializeCounts> {
  const { db, config, log } = deps;
  const counts: MaterializeCounts = { schedules: 0, fired: 0, missed: 0, budgetExhausted: false };
  for (;;) {
    if (options.elapsed() >= options.deadline) {
      counts.budgetExhausted = true;
      return counts;
    }
    const batch = await db.transaction(async (tx) => {
      const due = await lockDueSchedules(tx, {
        now: options.now,
        lookaheadSeconds: config.lookaheadSeconds,
        limit: config.scheduleBatchSize,
      });
      if (due.length === 0) return 0;
      const occurrences: Occurrence[] = [];
      const advances: ScheduleAdvance[] = [];
      for (const { schedule, busy, now } of due) {
        try {
          const plan = planOccurrences(schedule, busy, now, config.lookaheadSeconds);
          occurrences.push(...plan.occurrences);
          advances.push(plan.advance);
        } catch (error) {
          // A schedule the maths refuses must not block the others: stop it, loudly.
          log.error('schedule cannot be materialized; stopped', { scheduleId: schedule.id, tenant: schedule.tenant, error });
          advances.push({ id: schedule.id, nextRunAt: null, lastFiredAt: null });
        }
      }
      const written = await fireOccurrences(tx, { now: options.now, occurrences, advances });
      counts.fired += written.fired;
      counts.missed += written.missed;
      return due.length;
    });
    counts.schedules += batch;
    if (batch < config.scheduleBatchSize) return counts;
  }
}
