// Run a schedule now (issue 15): one occurrence due now, whatever the
// schedule's next fire time, without moving it; a paused schedule too (that
// is how people test one). Overlap and misfire policies do not apply to it:
// it is an explicit request, and under overlap `skip` it counts as the
// outstanding run for the regular fire times, like any occurrence.
//
// The occurrence key (schedule_id, scheduled_for) is unique. A triggered run
// takes the current millisecond, or the first later one that is neither
// taken nor one of the schedule's own fire times: fire times are whole
// milliseconds, so a trigger never takes the slot of a regular occurrence
// (whose insert would then do nothing, and the fire would be lost), and two
// triggers in one millisecond take the next ones.
//
// Quota (maxPendingTasks): the occurrence is a new pending task, counted by
// the insert itself like an enqueue's (429 quota_exceeded).
import type { Config } from '../config.ts';
import type { Queryable } from '../db/seam.ts';
import { getScheduleWithClock, insertTriggeredOccurrence } from '../db/sql/trigger.ts';
import { AppError, notFound } from '../errors.ts';
import type { Schedule } from '../db/sql/scheduleRows.ts';
import type { Task } from '../db/sql/taskRows.ts';
import { specOf } from './recurrence.ts';
import { nextFireTime } from './recurrence.ts';

/** Candidate milliseconds offered to one insert. */
const SLOTS_PER_TRY = 8;
/**
 * Concurrent triggers of one schedule read the same free slot; each round at
 * least one of them wins it (every try is a fresh statement), so N racers
 * need up to N rounds.
 */
const MAX_TRIES = 16;

/** The first `count` milliseconds from `from` that are not fire times of the schedule. */
export function triggerSlots(s: Schedule, from: Date, count: number): Date[] {
  const spec = specOf(s);
  const slots: Date[] = [];
  for (let ms = from.getTime(); slots.length < count; ms++) {
    let isFireTime = false;
    try {
      isFireTime = nextFireTime(spec, new Date(ms - 1))?.getTime() === ms;
    } catch {
      // A spec the maths refuses has no fire times to avoid.
    }
    if (!isFireTime) slots.push(new Date(ms));
  }
  return slots;
}

export async function triggerSchedule(
  deps: { db: Queryable; config: Config },
  tenant: string,
  name: string,
  now?: Date,
): Promise<Task> {
  let from: Date | null = null;
  for (let run = 1; run <= MAX_TRIES; run++) {
    const found = await getScheduleWithClock(deps.db, { now, tenant, name });
    if (!found) throw notFound('schedule');
    const start = from && from > found.now ? from : found.now;
    const slots = triggerSlots(found.schedule, start, SLOTS_PER_TRY);
    const task = await insertTriggeredOccurrence(deps.db, {
      now,
      tenant,
      scheduleId: found.schedule.id,
      lookaheadSeconds: deps.config.lookaheadSeconds,
      slots,
      maxPendingTasks: deps.config.quotaMaxPendingTasks,
    });
    if (task) return task;
    // Every slot was taken by concurrent triggers (or the schedule was just
    // replaced by another of the same name): look again, later.
    from = new Date(slots.at(-1)!.getTime() + 1);
  }
  throw new AppError('conflict', 'too many concurrent triggers of this schedule; try again');
}
