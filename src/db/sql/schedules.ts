// Schedule statements: the API's reads and writes (always scoped by tenant),
// and the materializer's two per-batch statements.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import { SCHEDULE_COLUMNS, scheduleFromRow, type Schedule, type ScheduleRow } from './scheduleRows.ts';
import { freeSlotsOf, slotLimitsOf } from './concurrency.ts';
import { countPendingOf, LIVE, NOT_STARTED } from './tasks-shared.ts';
import { shownStatusSql, TASK_COLUMNS, TASK_COLUMNS_SHOWN, taskFromRow, type Task, type TaskRow } from './taskRows.ts';

type Now = Date | null | undefined;
const at = (now: Now) => now ?? null;

const dbNow = sql('clock_now', `select coalesce($1::timestamptz, now()) as now`);

/** The database clock (or the override), for computations done in TypeScript. */
export async function databaseNow(q: Queryable, now?: Now): Promise<Date> {
  return (await q.query<{ now: Date }>(dbNow, [at(now)]))[0]!.now;
}

const schedulesGetForUpdate = sql(
  'schedules_get_for_update',
  `select ${SCHEDULE_COLUMNS} from schedules where tenant = $1::text and name = $2::text for update`,
);

export async function getScheduleForUpdate(q: Queryable, tenant: string, name: string): Promise<Schedule | null> {
  const rows = await q.query<ScheduleRow>(schedulesGetForUpdate, [tenant, name]);
  return rows[0] ? scheduleFromRow(rows[0]) : null;
}

const schedulesGet = sql('schedules_get', `select ${SCHEDULE_COLUMNS} from schedules where tenant = $1::text and name = $2::text`);

export async function getSchedule(q: Queryable, tenant: string, name: string): Promise<Schedule | null> {
  const rows = await q.query<ScheduleRow>(schedulesGet, [tenant, name]);
  return rows[0] ? scheduleFromRow(rows[0]) : null;
}

export type ScheduleWrite = Omit<Schedule, 'id' | 'createdAt' | 'updatedAt' | 'lastFiredAt'>;

/**
 * Creates or replaces a schedule by (tenant, name). A replacement keeps its
 * id, creation time and last fire; occurrences already made keep their
 * payload snapshot. The queue's row is created with it, so its occurrences
 * can be claimed.
 */
const schedulesUpsert = sql(
  'schedules_upsert',
  `with known_queue as (insert into queues (name) values ($9::text) on conflict do nothing)
   insert into schedules as s (tenant, name, kind, cron, timezone, interval_seconds, recurrence_every,
     recurrence_unit, recurrence_start, fire_at, task, payload, queue, max_attempts, options, misfire,
     misfire_grace_seconds, catch_up_limit, overlap, enabled, next_run_at, created_at, updated_at)
   values ($2::text, $3::text, $4::text, $5::text, $6::text, $7::int, $8::int, $10::text, $11::timestamptz,
     $12::timestamptz, $13::text, $14::jsonb, $9::text, $15::int, $16::jsonb, $17::text, $18::int, $19::int,
     $20::text, $21::boolean, $22::timestamptz, coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now()))
   on conflict (tenant, name) do update set
     kind = excluded.kind, cron = excluded.cron, timezone = excluded.timezone,
     interval_seconds = excluded.interval_seconds, recurrence_every = excluded.recurrence_every,
     recurrence_unit = excluded.recurrence_unit, recurrence_start = excluded.recurrence_start,
     fire_at = excluded.fire_at, task = excluded.task, payload = excluded.payload, queue = excluded.queue,
     max_attempts = excluded.max_attempts, options = excluded.options, misfire = excluded.misfire,
     misfire_grace_seconds = excluded.misfire_grace_seconds, catch_up_limit = excluded.catch_up_limit,
     overlap = excluded.overlap, enabled = excluded.enabled, next_run_at = excluded.next_run_at,
     updated_at = excluded.updated_at
   returning ${SCHEDULE_COLUMNS.split(',').map((c) => `s.${c.trim()}`).join(', ')}, (s.xmax = 0) as created`,
);

export async function upsertSchedule(q: Queryable, w: ScheduleWrite, now?: Now): Promise<{ schedule: Schedule; created: boolean }> {
  const rows = await q.query<ScheduleRow & { created: boolean }>(schedulesUpsert, [
    at(now),
    w.tenant,
    w.name,
    w.kind,
    w.cron,
    w.timezone,
    w.intervalSeconds,
    w.recurrenceEvery,
    w.queue,
    w.recurrenceUnit,
    w.anchor,
    w.fireAt,
    w.task,
    JSON.stringify(w.payload),
    w.maxAttempts,
    JSON.stringify(w.options),
    w.misfire,
    w.misfireGraceSeconds,
    w.catchUpLimit,
    w.overlap,
    w.enabled,
    w.nextRunAt,
  ]);
  return { schedule: scheduleFromRow(rows[0]!), created: rows[0]!.created };
}

const schedulesList = sql(
  'schedules_list_for_tenant',
  `select ${SCHEDULE_COLUMNS} from schedules
   where tenant = $1::text and ($2::text is null or name > $2::text)
   order by name limit $3::int`,
);

export async function listSchedules(q: Queryable, tenant: string, p: { afterName?: string; limit: number }): Promise<Schedule[]> {
  const rows = await q.query<ScheduleRow>(schedulesList, [tenant, p.afterName ?? null, p.limit]);
  return rows.map(scheduleFromRow);
}

/**
 * Pauses a schedule and, in the same statement, takes back its occurrences
 * that have not started, whether or not the look-ahead claimed them early
 * (issue 11: nothing fires after the pause answers; a handler that already
 * started finishes):
 * - withdraw_if_not_started: occurrences planned for after now are deleted.
 *   They exist only because the look-ahead materialized them early; deleting
 *   (not cancelling) them frees their (schedule_id, scheduled_for) key, so a
 *   resume can plan those fire times again.
 * - cancel_if_not_started: occurrences already due (late, waiting for a
 *   worker) are cancelled and stay as history.
 * next_run_at goes back to the first withdrawn fire time, so a resume applies
 * the misfire policy from the pause time.
 * A message in flight for a withdrawn or cancelled occurrence finds no
 * running task at its epoch and is skipped. The caller locks the schedule row
 * first (getScheduleForUpdate): this statement's snapshot then includes every
 * occurrence a concurrent materialization committed.
 */
const schedulesPause = sql(
  'schedules_pause_withdraw_occurrences',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   target as (select s.id from schedules s where s.tenant = $2::text and s.name = $3::text),
   withdrawn as (
     -- occurrences_by_live_index: LIVE beside NOT_STARTED, so the live
     -- occurrences' index answers; by the occurrence key alone, a pause read
     -- the schedule's whole history (17-29 ms at 10,080 occurrences).
     delete from tasks t using target, clock
     where t.schedule_id = target.id and t.scheduled_for > clock.now and ${LIVE} and ${NOT_STARTED}
     returning t.id, t.scheduled_for, t.status, t.tenant, t.concurrency_key
   ),
   withdrawn_attempts as (
     delete from task_attempts a using withdrawn w where a.task_id = w.id
   ),
   -- Locked first, so the status read is the one the cancel replaces.
   due as (
     select t.id, t.status, t.tenant, t.concurrency_key from tasks t, target, clock
     where t.schedule_id = target.id and t.scheduled_for <= clock.now and ${LIVE} and ${NOT_STARTED}
     for update of t
   ),
   cancelled as (
     -- By id (joined, a generic plan hashed a seq scan of tasks for a few rows).
     update tasks t set status = 'cancelled', finished_at = clock.now, lease_expires_at = null, updated_at = clock.now
     from clock
     where t.id = any(array(select due.id from due))
     returning t.id, t.tenant
   ),
   -- One write per row of the counts: two inserts of one row in one statement fail.
   ${countPendingOf('pending_counted', '-', '(select tenant from withdrawn union all select tenant from cancelled)')},
   -- Occurrences claimed early give their slots back.
   ${freeSlotsOf(`(select w.tenant, w.concurrency_key from withdrawn w where w.status = 'running'
                    union all
                    select d.tenant, d.concurrency_key from due d join cancelled c on c.id = d.id where d.status = 'running')`)}
   update schedules s set
     enabled = false,
     next_run_at = least(s.next_run_at, (select min(scheduled_for) from withdrawn)),
     updated_at = clock.now
   from target, clock, slots_freed
   where s.id = target.id
   returning ${SCHEDULE_COLUMNS.split(',').map((c) => `s.${c.trim()}`).join(', ')},
             (select count(*) from withdrawn)::int as withdrawn, (select count(*) from cancelled)::int as cancelled`,
);

export async function pauseScheduleWithdrawOccurrences(
  q: Queryable,
  p: { now?: Now; tenant: string; name: string },
): Promise<{ schedule: Schedule; withdrawn: number; cancelled: number } | null> {
  const rows = await q.query<ScheduleRow & { withdrawn: number; cancelled: number }>(schedulesPause, [at(p.now), p.tenant, p.name]);
  const r = rows[0];
  return r ? { schedule: scheduleFromRow(r), withdrawn: r.withdrawn, cancelled: r.cancelled } : null;
}

/**
 * Replacing a schedule: its occurrences planned for after now under the old
 * definition and not started (claimed early or not) are deleted, so future
 * fires follow the new definition, even at the same instants (issue 11).
 * Occurrences already due keep their snapshot, as they would have without the
 * look-ahead. The caller holds the schedule's row lock.
 */
const schedulesWithdrawPlanned = sql(
  'schedules_withdraw_planned_if_not_started',
  `with withdrawn as (
   delete from tasks t using schedules s
   where s.tenant = $2::text and s.name = $3::text and t.schedule_id = s.id
     and t.scheduled_for > coalesce($1::timestamptz, now()) and ${NOT_STARTED}
   returning t.id, t.status, t.tenant, t.concurrency_key
   ),
   withdrawn_attempts as (
     delete from task_attempts a using withdrawn w where a.task_id = w.id
   ),
   ${countPendingOf('pending_counted', '-', 'withdrawn')},
   -- Occurrences claimed early give their slots back.
   ${freeSlotsOf(`(select w.tenant, w.concurrency_key from withdrawn w where w.status = 'running')`)}
   select w.id from withdrawn w cross join slots_freed`,
);

export async function withdrawPlannedOccurrences(q: Queryable, p: { now?: Now; tenant: string; name: string }): Promise<number> {
  return (await q.query(schedulesWithdrawPlanned, [at(p.now), p.tenant, p.name])).length;
}

/** Resume (enabled = true); next_run_at is kept, so a resume applies the misfire policy. */
const schedulesSetEnabled = sql(
  'schedules_set_enabled',
  `update schedules set enabled = $3::boolean, updated_at = coalesce($1::timestamptz, now())
   where tenant = $2::text and name = $4::text
   returning ${SCHEDULE_COLUMNS}`,
);

export async function setScheduleEnabled(
  q: Queryable,
  p: { now?: Now; tenant: string; name: string; enabled: boolean },
): Promise<Schedule | null> {
  const rows = await q.query<ScheduleRow>(schedulesSetEnabled, [at(p.now), p.tenant, p.enabled, p.name]);
  return rows[0] ? scheduleFromRow(rows[0]) : null;
}

/**
 * Cancels a schedule's occurrences that have not started (claimed early or
 * not). Runs in the delete's transaction, after the schedule's row lock and
 * before the row goes; the rest keep their schedule_id as history.
 */
const schedulesCancelPending = sql(
  'schedules_cancel_pending_occurrences',
  `with pending as (
     -- Locked first, so the status read is the one the cancel replaces.
     -- occurrences_by_live_index, as the pause's.
     select t.id, t.status, t.tenant, t.concurrency_key from tasks t join schedules s on t.schedule_id = s.id
     where s.tenant = $2::text and s.name = $3::text and ${LIVE} and ${NOT_STARTED}
     for update of t
   ),
   cancelled as (
     update tasks t set status = 'cancelled', finished_at = coalesce($1::timestamptz, now()),
                        lease_expires_at = null, updated_at = coalesce($1::timestamptz, now())
     from pending p
     where t.id = p.id
     returning t.id, t.tenant
   ),
   ${countPendingOf('pending_counted', '-', 'cancelled')},
   -- Occurrences claimed early give their slots back.
   ${freeSlotsOf(`(select p.tenant, p.concurrency_key from pending p join cancelled c on c.id = p.id where p.status = 'running')`)}
   select c.id from cancelled c cross join slots_freed`,
);

export async function cancelPendingOccurrences(q: Queryable, p: { now?: Now; tenant: string; name: string }): Promise<number> {
  return (await q.query(schedulesCancelPending, [at(p.now), p.tenant, p.name])).length;
}

const schedulesDelete = sql(
  'schedules_delete',
  `delete from schedules where tenant = $1::text and name = $2::text returning ${SCHEDULE_COLUMNS}`,
);

export async function deleteScheduleRow(q: Queryable, p: { tenant: string; name: string }): Promise<Schedule | null> {
  const rows = await q.query<ScheduleRow>(schedulesDelete, [p.tenant, p.name]);
  return rows[0] ? scheduleFromRow(rows[0]) : null;
}

/** A schedule's occurrences, newest fire time first, keyset on scheduled_for. */
const schedulesListRuns = sql(
  'schedules_list_runs',
  `select ${TASK_COLUMNS_SHOWN} from tasks
   where tenant = $1::text and schedule_id = $2::bigint
     and ($3::timestamptz is null or scheduled_for < $3::timestamptz)
     and ($4::text[] is null or ${shownStatusSql()} = any($4::text[]))
   order by scheduled_for desc
   limit $5::int`,
);

export async function listScheduleRuns(
  q: Queryable,
  tenant: string,
  scheduleId: string,
  p: { before?: Date; statuses?: readonly string[]; limit: number },
): Promise<Task[]> {
  const rows = await q.query<TaskRow>(schedulesListRuns, [
    tenant,
    scheduleId,
    p.before ?? null,
    p.statuses && p.statuses.length > 0 ? p.statuses : null,
    p.limit,
  ]);
  return rows.map(taskFromRow);
}

// ---------------------------------------------------------------------------
// Materialization

export interface DueSchedule {
  schedule: Schedule;
  /** A previous occurrence has not finished (for overlap = skip). */
  busy: boolean;
  /** The database clock (or the override) when the batch was locked. */
  now: Date;
}

/**
 * Locks a bounded batch of due schedules (SKIP LOCKED: concurrent sweeps take
 * disjoint batches). Due means next_run_at within the look-ahead, except for
 * overlap = skip schedules, which are only materialized once due: whether the
 * previous run finished is only known then.
 *
 * busy_from_live_occurrences: `busy` reads tasks_live_occurrences_idx
 * (migration 0028), which holds a schedule's waiting and running occurrences
 * only; its predicate is implied here, so the history is never read.
 */
const schedulesLockDue = sql(
  'schedules_lock_due',
  `select ${SCHEDULE_COLUMNS.split(',').map((c) => `s.${c.trim()}`).join(', ')},
          exists (select 1 from tasks t where t.schedule_id = s.id and ${LIVE}) as busy,
          coalesce($1::timestamptz, now()) as db_now
   from schedules s
   where s.enabled and s.next_run_at is not null
     and s.next_run_at <= coalesce($1::timestamptz, now()) + make_interval(secs => $2::int)
     and (s.overlap = 'allow' or s.next_run_at <= coalesce($1::timestamptz, now()))
   order by s.next_run_at
   limit $3::int
   for update of s skip locked`,
);

export async function lockDueSchedules(
  q: Queryable,
  p: { now?: Now; lookaheadSeconds: number; limit: number },
): Promise<DueSchedule[]> {
  const rows = await q.query<ScheduleRow & { busy: boolean; db_now: Date }>(schedulesLockDue, [at(p.now), p.lookaheadSeconds, p.limit]);
  return rows.map((r) => ({ schedule: scheduleFromRow(r), busy: r.busy, now: r.db_now }));
}

export interface Occurrence {
  scheduleId: string;
  scheduledFor: Date;
  /** `scheduled`: to run at scheduledFor; `missed`: recorded, never run. */
  status: 'scheduled' | 'missed';
  note: string | null;
}

export interface ScheduleAdvance {
  id: string;
  nextRunAt: Date | null;
  lastFiredAt: Date | null;
}

/**
 * Writes a batch's occurrences and advances its schedules in one statement.
 * Each occurrence is a task carrying a snapshot of the schedule's payload;
 * ON CONFLICT on (schedule_id, scheduled_for) makes a fire time that another
 * sweep (or an earlier, cut-off run of this one) already wrote a no-op.
 */
const schedulesFireOccurrences = sql(
  'schedules_fire_occurrences',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   occ as (
     select * from unnest($2::bigint[], $3::timestamptz[], $4::text[], $5::text[])
       as o(schedule_id, scheduled_for, status, note)
   ),
   known_queues as (
     insert into queues (name)
     select distinct s.queue from occ join schedules s on s.id = occ.schedule_id order by 1
     on conflict do nothing
   ),
   inserted as (
     insert into tasks (tenant, queue, task, payload, status, run_at, max_attempts, backoff_base_ms,
                        backoff_max_ms, timeout_ms, delivery, schedule_id, scheduled_for, finished_at,
                        last_error, created_at, updated_at, concurrency_key, concurrency_limit, priority, callback,
                        rate_key, rate_limit, rate_period_seconds)
     select s.tenant, s.queue, s.task, s.payload, o.status, o.scheduled_for, s.max_attempts,
            (s.options->>'backoffBaseMs')::int, (s.options->>'backoffMaxMs')::int, (s.options->>'timeoutMs')::int,
            s.options->>'delivery', s.id, o.scheduled_for,
            case when o.status = 'missed' then clock.now end, o.note, clock.now, clock.now,
            s.options->'concurrency'->>'key', (s.options->'concurrency'->>'limit')::int,
            coalesce((s.options->>'priority')::smallint, 0), nullif(s.options->'callback', 'null'::jsonb),
            s.options->'rateLimit'->>'key', (s.options->'rateLimit'->>'limit')::int,
            (s.options->'rateLimit'->>'periodSeconds')::int
     from occ o join schedules s on s.id = o.schedule_id, clock
     order by o.scheduled_for
     on conflict (schedule_id, scheduled_for) where schedule_id is not null do nothing
     returning id, status, tenant, concurrency_key, concurrency_limit
   ),
   -- A missed occurrence never runs: its limit is not the key's.
   ${slotLimitsOf(`(select i.tenant, i.concurrency_key as key, i.concurrency_limit as max_running, i.id as ord
                   from inserted i where i.status <> 'missed')`)},
   -- A missed occurrence is born finished.
   ${countPendingOf('pending_counted', '+', "(select tenant from inserted where status <> 'missed')")},
   advanced as (
     update schedules s set next_run_at = u.next_run_at,
                            last_fired_at = coalesce(u.last_fired_at, s.last_fired_at),
                            updated_at = clock.now
     from unnest($6::bigint[], $7::timestamptz[], $8::timestamptz[]) as u(id, next_run_at, last_fired_at), clock
     where s.id = u.id
   )
   select count(*) filter (where status = 'scheduled')::int as fired,
          count(*) filter (where status = 'missed')::int as missed
   from inserted`,
);

export async function fireOccurrences(
  q: Queryable,
  p: { now?: Now; occurrences: readonly Occurrence[]; advances: readonly ScheduleAdvance[] },
): Promise<{ fired: number; missed: number }> {
  const rows = await q.query<{ fired: number; missed: number }>(schedulesFireOccurrences, [
    at(p.now),
    p.occurrences.map((o) => o.scheduleId),
    p.occurrences.map((o) => o.scheduledFor),
    p.occurrences.map((o) => o.status),
    p.occurrences.map((o) => o.note),
    p.advances.map((a) => a.id),
    p.advances.map((a) => a.nextRunAt),
    p.advances.map((a) => a.lastFiredAt),
  ]);
  return rows[0] ?? { fired: 0, missed: 0 };
}
