// Run a schedule now (issue 15): one occurrence due now, whatever the
// schedule's next fire time, which stays as it is.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import { slotLimitsOf } from './concurrency.ts';
import { SCHEDULE_COLUMNS, scheduleFromRow, type Schedule, type ScheduleRow } from './scheduleRows.ts';
import { TASK_COLUMNS, taskFromRow, type Task, type TaskRow } from './taskRows.ts';
import { FAIR_VTIME_OF_INPUT, KNOWN_QUEUES_OF_INPUT, pendingQuotaOf } from './tasks-enqueue.ts';
import { countPendingOf } from './tasks-shared.ts';

type Now = Date | null | undefined;

const TASK_COLUMNS_T = TASK_COLUMNS.split(',')
  .map((c) => `t.${c.trim()}`)
  .join(', ');

const schedulesGetWithClock = sql(
  'schedules_get_with_clock',
  `select ${SCHEDULE_COLUMNS}, coalesce($1::timestamptz, now()) as db_now
   from schedules where tenant = $2::text and name = $3::text`,
);

/** The tenant's schedule and the database clock (or the override), in one round trip. */
export async function getScheduleWithClock(
  q: Queryable,
  p: { now?: Now; tenant: string; name: string },
): Promise<{ schedule: Schedule; now: Date } | null> {
  const rows = await q.query<ScheduleRow & { db_now: Date }>(schedulesGetWithClock, [p.now ?? null, p.tenant, p.name]);
  return rows[0] ? { schedule: scheduleFromRow(rows[0]), now: rows[0].db_now } : null;
}

/**
 * Inserts one occurrence of the schedule at the first of `slots` that no
 * occurrence holds yet, as the materializer would (payload and options from
 * the schedule row, read in this statement), born `queued` with its vtime
 * when due within the look-ahead. The schedule row is not written: paused or
 * not, its next_run_at and last_fired_at stay. Guards: the tenant, the
 * schedule id (a schedule deleted and re-created meanwhile is another one),
 * and the occurrence key (schedule_id, scheduled_for), whose ON CONFLICT
 * turns a slot taken by a concurrent trigger into no row: the caller then
 * tries later slots. The tenant's maxPendingTasks counts the occurrence
 * (`pending_quota`, shared with the enqueue: over it, TQ002, 429).
 * Locks the tenant's fair-queuing row of the queue.
 */
const schedulesTriggerOccurrence = sql(
  'schedules_trigger_occurrence',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   s as (select * from schedules where tenant = $2::text and id = $4::bigint),
   slot as (
     select c.at from unnest($5::timestamptz[]) as c(at), s
     where not exists (select 1 from tasks o where o.schedule_id = s.id and o.scheduled_for = c.at)
     order by c.at
     limit 1
   ),
   ${pendingQuotaOf('$6::int', '(select count(*) from slot)')},
   input as (
     select s.*, slot.at as due_at, slot.at <= clock.now + make_interval(secs => $3::int) as runnable, 1 as ord
     from s, slot, clock, pending_quota
     where pending_quota.ok
   ),
   ${KNOWN_QUEUES_OF_INPUT},
   ${FAIR_VTIME_OF_INPUT},
   written as (
     insert into tasks as t (tenant, queue, task, payload, status, run_at, max_attempts, backoff_base_ms,
                             backoff_max_ms, timeout_ms, delivery, vtime, schedule_id, scheduled_for,
                             created_at, updated_at, concurrency_key, concurrency_limit, priority, callback,
                             rate_key, rate_limit, rate_period_seconds)
     select r.tenant, r.queue, r.task, r.payload, case when r.runnable then 'queued' else 'scheduled' end,
            r.due_at, r.max_attempts, (r.options->>'backoffBaseMs')::int, (r.options->>'backoffMaxMs')::int,
            (r.options->>'timeoutMs')::int, r.options->>'delivery', r.vtime, r.id, r.due_at, clock.now, clock.now,
            r.options->'concurrency'->>'key', (r.options->'concurrency'->>'limit')::int,
            coalesce((r.options->>'priority')::smallint, 0), nullif(r.options->'callback', 'null'::jsonb),
            r.options->'rateLimit'->>'key', (r.options->'rateLimit'->>'limit')::int,
            (r.options->'rateLimit'->>'periodSeconds')::int
     from rows r, clock
     on conflict (schedule_id, scheduled_for) where schedule_id is not null do nothing
     returning ${TASK_COLUMNS_T}
   ),
   ${slotLimitsOf('(select w.tenant, w.concurrency_key as key, w.concurrency_limit as max_running, w.id as ord from written w)')},
   ${countPendingOf('pending_counted', '+', 'written')}
   select * from written`,
);

/** The occurrence, or null when every slot was taken (or the schedule is gone). */
export async function insertTriggeredOccurrence(
  q: Queryable,
  p: { now?: Now; tenant: string; scheduleId: string; lookaheadSeconds: number; slots: readonly Date[]; maxPendingTasks: number },
): Promise<Task | null> {
  const rows = await q.query<TaskRow>(schedulesTriggerOccurrence, [
    p.now ?? null,
    p.tenant,
    p.lookaheadSeconds,
    p.scheduleId,
    p.slots,
    p.maxPendingTasks,
  ]);
  return rows[0] ? taskFromRow(rows[0]) : null;
}
