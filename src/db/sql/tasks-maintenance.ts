// Maintenance, run by the sweep: promote due scheduled tasks, reap expired
// leases, purge finished tasks past retention. Conventions: tasks-shared.ts.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import { freeSlotsOf, parkedIfKeyFull, type FlowKey } from './concurrency.ts';
import { FAIR_VTIME_OF_INPUT } from './tasks-enqueue.ts';
import { at, countPendingOf, type Now } from './tasks-shared.ts';

/**
 * Makes due `scheduled` tasks runnable: locks a bounded batch (SKIP LOCKED, so
 * concurrent sweeps split the work), advances each (queue, tenant) row once
 * for its share of the batch, and gives every task its vtime in run_at order
 * (the fair step every statement that makes tasks runnable shares). A task
 * of a full concurrency key is made runnable parked (parked_if_key_full).
 */
const tasksPromoteDue = sql(
  'tasks_promote_due',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   due as (
     -- promote_bound_in_index: the bound is a value (the clock's, read once),
     -- not a join with the clock, so it is the due index's condition and
     -- the scan stops at it. Joined, it filtered every scheduled task in
     -- run_at order: a sweep read the whole future backlog to promote none.
     select t.id, t.queue, t.tenant, t.run_at from tasks t
     where t.status = 'scheduled' and t.run_at <= (select now from clock) + make_interval(secs => $2::int)
     order by t.run_at, t.id
     limit $3::int
     for update of t skip locked
   ),
   input as (
     select d.id, d.queue, d.tenant, true as runnable, row_number() over (order by d.run_at, d.id) as ord from due d
   ),
   ${FAIR_VTIME_OF_INPUT}
   update tasks t set status = 'queued', vtime = r.vtime,
     parked = ${parkedIfKeyFull('true', 't.tenant', 't.concurrency_key')}, updated_at = clock.now
   from rows r, clock
   -- updates_by_id (tasks-shared.ts)
   where t.id = any(array(select x.id from rows x)) and t.id = r.id
   returning t.id`,
);

export async function promoteDueTasks(
  q: Queryable,
  p: { now?: Now; lookaheadSeconds: number; limit: number },
): Promise<number> {
  const rows = await q.query(tasksPromoteDue, [at(p.now), p.lookaheadSeconds, p.limit]);
  return rows.length;
}

export interface ReapCounts {
  requeued: number;
  retried: number;
  dead: number;
}

/**
 * Handles running tasks whose lease expired (DESIGN §5.1). A task handed to
 * the Queue keeps the claim's lease on its row; its batch's dispatch mark
 * extends it to the dispatch lease from the mark's time, read here only for
 * tasks whose claim lease ran out before they started. "Sent" means a mark
 * (or, for rows marked before migration 0015, dispatched_at). Never handed to the
 * Queue: back to `queued` with its vtime and without spending the attempt.
 * At-most-once and provably never started (started_at null: the fenced start
 * never committed, so no handler ran): back to `queued` the same way; its old
 * message, if it ever arrives, finds the task queued or re-claimed under a
 * new epoch and is skipped by the fenced start. Otherwise handed off: under
 * at-least-once a failed attempt (retry with backoff, or `dead` when none is
 * left); under at-most-once (started) finished without redelivery.
 */
const tasksReapExpired = sql(
  'tasks_reap_expired',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   expired as (
     select t.id, t.attempts as attempt, t.lease_epoch, t.started_at as attempt_started_at,
            case when t.dispatched_at is null and d.claim_token is null and t.started_at is null then 'queued'
                 -- Guard: at-most-once never started is requeued, never dead.
                 when t.delivery = 'at_most_once' and t.started_at is null then 'queued'
                 when t.delivery = 'at_most_once' then 'dead'
                 when t.attempts < t.max_attempts then 'scheduled'
                 else 'dead' end as next_status
     from tasks t left join dispatch_marks d on d.claim_token = t.claim_token, clock
     where t.status = 'running' and t.lease_expires_at < clock.now
       -- Guard dispatch_lease_from_mark: a batch handed to the Queue holds its
       -- tasks that have not started for the dispatch lease from its mark.
       and (t.started_at is not null or d.claim_token is null
            or greatest(t.run_at, d.dispatched_at) + make_interval(secs => $3::int) < clock.now)
     order by t.lease_expires_at
     limit $2::int
     for update of t skip locked
   ),
   reaped as (
   update tasks t set
     status = e.next_status,
     attempts = case when e.next_status = 'queued' then t.attempts - 1 else t.attempts end,
     run_at = case when e.next_status = 'scheduled'
                   then clock.now + task_backoff_ms(t.backoff_base_ms, t.backoff_max_ms, t.attempts) * interval '1 millisecond'
                   else t.run_at end,
     vtime = case when e.next_status = 'scheduled' then null else t.vtime end,
     finished_at = case when e.next_status = 'dead' then clock.now end,
     dispatched_at = case when e.next_status = 'dead' then t.dispatched_at end,
     started_at = case when e.next_status = 'dead' then t.started_at end,
     lease_expires_at = null,
     last_error = case
       when e.next_status = 'queued' then t.last_error
       when t.delivery = 'at_most_once' then 'lease expired after dispatch; at_most_once: not redelivered'
       else 'lease expired: the consumer did not report (attempt ' || t.attempts || ')' end,
     updated_at = clock.now
   from expired e, clock
   -- updates_by_id (tasks-shared.ts)
   where t.id = any(array(select x.id from expired x)) and t.id = e.id
   returning e.next_status, t.id, t.last_error, e.attempt, e.lease_epoch, e.attempt_started_at, clock.now,
             t.tenant, t.concurrency_key
   ),
   ${freeSlotsOf('reaped')},
   ${countPendingOf('pending_counted', '-', "(select tenant from reaped where next_status = 'dead')")},
   -- Attempt history (migration 0017): an attempt handed off and never
   -- reported is \`lease_expired\`; a claim given back (queued) was no attempt.
   attempts_written as (
     insert into task_attempts (task_id, attempt, epoch, outcome, started_at, finished_at, error_name, error_message)
     select r.id, r.attempt, r.lease_epoch, 'lease_expired', r.attempt_started_at, r.now, 'LeaseExpired', r.last_error
     from reaped r
     where r.next_status <> 'queued'
   )
   select r.next_status from reaped r cross join slots_freed`,
);

export async function reapExpiredLeases(
  q: Queryable,
  p: { now?: Now; limit: number; dispatchLeaseSeconds: number },
): Promise<ReapCounts> {
  const rows = await q.query<{ next_status: string }>(tasksReapExpired, [at(p.now), p.limit, p.dispatchLeaseSeconds]);
  const counts: ReapCounts = { requeued: 0, retried: 0, dead: 0 };
  for (const r of rows) {
    if (r.next_status === 'queued') counts.requeued += 1;
    else if (r.next_status === 'scheduled') counts.retried += 1;
    else counts.dead += 1;
  }
  return counts;
}

/**
 * Deletes a bounded batch of terminal tasks past retention. Idempotency keys
 * of deleted tasks move to spent_idempotency_keys in the same statement, so a
 * spent key stays spent after its task is gone. The same statement deletes
 * a bounded batch of dispatch marks older than `$4` seconds: past every lease
 * they could hold (the caller passes the dispatch lease plus the look-ahead
 * plus a margin for a reaper that fell behind).
 */
const tasksPurgeFinished = sql(
  'tasks_purge_finished',
  `with doomed as (
     select id from tasks
     where status in ('succeeded', 'dead', 'cancelled', 'missed')
       and finished_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)
     order by finished_at
     limit $3::int
     for update skip locked
   ),
   -- purge_by_ids: each delete names its rows as an array, so every plan
   -- reads them by index. Joined, a generic plan (planned for a batch of any
   -- size) hashed a seq scan of the table instead: 238-347 ms for the
   -- attempts beside 328,000 kept, 13-21 ms for the marks (PostgreSQL 15).
   deleted as (
     delete from tasks t where t.id = any(array(select doomed.id from doomed))
     returning t.id, t.tenant, t.idempotency_key, t.status, t.concurrency_key
   ),
   attempts_purged as (
     delete from task_attempts a where a.task_id = any(array(select deleted.id from deleted))
   ),
   marks_purged as (
     delete from dispatch_marks m where m.claim_token = any(array(
       select claim_token from dispatch_marks
       where dispatched_at < coalesce($1::timestamptz, now()) - make_interval(secs => $4::int)
       order by dispatched_at
       limit $3::int))
   ),
   kept as (
     insert into spent_idempotency_keys (tenant, idempotency_key, task_id, status, spent_at)
     select tenant, idempotency_key, id, status, coalesce($1::timestamptz, now())
     from deleted where idempotency_key is not null
     on conflict do nothing
   ),
   keys as (select distinct tenant, concurrency_key as key from deleted where concurrency_key is not null)
   select (select count(*)::int from deleted) as n,
          coalesce((select array_agg(tenant order by tenant, key) from keys), '{}') as key_tenants,
          coalesce((select array_agg(key order by tenant, key) from keys), '{}') as keys`,
);

export interface PurgedTasks {
  purged: number;
  /** The concurrency keys of the deleted tasks: the slot rows that may have gone idle. */
  keys: FlowKey[];
}

export async function purgeFinishedTasks(
  q: Queryable,
  p: { now?: Now; retentionSeconds: number; limit: number; markRetentionSeconds: number },
): Promise<PurgedTasks> {
  const [r] = await q.query<{ n: number; key_tenants: string[]; keys: string[] }>(tasksPurgeFinished, [
    at(p.now),
    p.retentionSeconds,
    p.limit,
    p.markRetentionSeconds,
  ]);
  return { purged: r?.n ?? 0, keys: (r?.keys ?? []).map((key, i) => ({ tenant: r!.key_tenants[i]!, key })) };
}

/**
 * Forgets a batch of spent keys older than their retention, oldest first.
 * purge_reads_by_age (migration 0029): by the index on spent_at, bounded by
 * it, so a purge that finds none old enough reads none of the keys kept.
 */
const spentKeysPurge = sql(
  'spent_idempotency_keys_purge',
  `delete from spent_idempotency_keys s
   -- purge_by_ids, by row address (a spent key is never updated): joined on
   -- the key, a generic plan hashed a seq scan of every key kept.
   where s.ctid = any(array(
     select ctid from spent_idempotency_keys
     where spent_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)
     order by spent_at
     limit $3::int))
   returning 1`,
);

export async function purgeSpentKeys(
  q: Queryable,
  p: { now?: Now; retentionSeconds: number; limit: number },
): Promise<number> {
  return (await q.query(spentKeysPurge, [at(p.now), p.retentionSeconds, p.limit])).length;
}
