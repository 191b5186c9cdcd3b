// Dispatcher slots (migration 0019, issue 13) and the sweep's idle probe.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';

type Now = Date | null | undefined;
const at = (now: Now) => now ?? null;

/**
 * Takes one free dispatcher slot below the cap: the lowest whose lease ran
 * out, locked with SKIP LOCKED so dispatchers arriving together take
 * different slots (or none when all `$2` are held). The cap and the live
 * lease are the guards: a held slot is never taken over before its lease
 * expires, and never more than `$2` slots are held.
 */
const dispatcherSlotsAcquire = sql(
  'dispatcher_slots_acquire_free',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   free as (
     select s.slot from dispatcher_slots s, clock
     where s.slot < $2::int
       and s.expires_at <= clock.now
     order by s.slot
     limit 1
     for update of s skip locked
   )
   update dispatcher_slots d set
     token = $3::uuid,
     holder = $4::text,
     acquired_at = clock.now,
     expires_at = clock.now + make_interval(secs => $5::int)
   from free f, clock
   where d.slot = f.slot
   returning d.slot`,
);

/** Gives a slot back, only if this dispatcher's lease still holds it (its token). */
const dispatcherSlotsRelease = sql(
  'dispatcher_slots_release_own',
  `update dispatcher_slots set token = null, holder = null, acquired_at = null, expires_at = '-infinity'
   where slot = $1::int and token = $2::uuid
   returning slot`,
);

export interface DispatcherLease {
  slot: number;
  token: string;
}

export async function acquireDispatcherSlot(
  q: Queryable,
  p: { now?: Now; max: number; holder: string; leaseSeconds: number },
): Promise<DispatcherLease | null> {
  const token = crypto.randomUUID();
  const rows = await q.query<{ slot: number }>(dispatcherSlotsAcquire, [at(p.now), p.max, token, p.holder, p.leaseSeconds]);
  return rows[0] ? { slot: rows[0].slot, token } : null;
}

/** Returns false when the lease had run out and the slot was no longer this dispatcher's. */
export async function releaseDispatcherSlot(q: Queryable, lease: DispatcherLease): Promise<boolean> {
  return (await q.query(dispatcherSlotsRelease, [lease.slot, lease.token])).length > 0;
}

/** How many slots are held under a live lease (tests, metrics). */
const dispatcherSlotsCountHeld = sql(
  'dispatcher_slots_count_held',
  `select count(*)::int as n from dispatcher_slots where expires_at > coalesce($1::timestamptz, now())`,
);

export async function countHeldDispatcherSlots(q: Queryable, p: { now?: Now } = {}): Promise<number> {
  return (await q.query<{ n: number }>(dispatcherSlotsCountHeld, [at(p.now)]))[0]?.n ?? 0;
}

/**
 * The sweep's first statement (issue 13): is any step due? Each arm is a
 * superset of its step's own condition, read from that step's index, so
 * "nothing" here means every step would have found nothing. An idle
 * deployment then costs this one statement per cron tick.
 *
 * probe_reads_the_index: each arm over `tasks` asks for its first row in its
 * index's order, not `exists`. An `exists` drops any order, and the planner
 * priced its first row at a seq scan's cost divided by the rows it expected:
 * with statistics taken over a backlog that the sweeps have since claimed
 * (the drain's, and any table between two autoanalyzes), it read the table
 * whole to find the queued rows at its end: 16 of the probe's 19.5 ms in the
 * drain, where every sweep pays it (issue 12). In its index's order a first
 * row is an index's to give. The purge arm names no tenant, so only the
 * retention index can give it (retention_by_age, migration 0027). The
 * purge's other arms ask the same way, each of its table's index by age
 * (purge_reads_by_age, migration 0029): dispatch marks, spent keys and rate
 * lines grow with use, and a table read whole to find none old enough cost
 * every probe 26 ms at 100,000 rate keys, 150 ms at 1,000,000 spent keys.
 *
 * probe_parked_in_index_order: the parked arm asks in the order of
 * tasks_parked_priority_idx (migration 0034), priority included. In the
 * order of the index that migration replaced, no index gave its first row:
 * with every queued task parked behind a full key, each probe read and
 * sorted the whole parked backlog, or the table.
 *
 * probe_reap_last: one answer, its arms in one `or`, which stops at the
 * first that holds (an arm not reached is never run). The reap arm comes
 * last: no index orders the leases (one would cost the fenced start its HOT
 * update), so it reads every running task's row. A sweep with work queued
 * no longer pays it: with 10,000 running and 10,000 queued, 1.9 ms a probe
 * before, 0.03 ms after (PostgreSQL 15).
 */
const sweepProbeDueWork = sql(
  'sweep_probe_due_work',
  `with clock as (select coalesce($1::timestamptz, now()) as now)
   select
     -- dispatch: runnable or parked tasks
     (select true from tasks t where t.status = 'queued' and not t.parked
      order by t.queue, t.vtime, t.id limit 1) is not null
     or (select true from tasks t where t.status = 'queued' and t.parked
         order by t.tenant, t.concurrency_key, t.priority desc, t.vtime, t.id limit 1) is not null
     -- promote: scheduled tasks within the look-ahead
     or (select true from tasks t
         where t.status = 'scheduled' and t.run_at <= clock.now + make_interval(secs => $2::int)
         order by t.run_at limit 1) is not null
     -- materialize: due schedules
     or exists (select 1 from schedules s
                where s.enabled and s.next_run_at is not null
                  and s.next_run_at <= clock.now + make_interval(secs => $2::int))
     -- purge: history, marks, spent keys and rate lines past their retention
     or (select true from tasks t
         where t.status in ('succeeded', 'dead', 'cancelled', 'missed')
           and t.finished_at < clock.now - make_interval(secs => $3::int)
         order by t.finished_at limit 1) is not null
     or (select true from dispatch_marks m where m.dispatched_at < clock.now - make_interval(secs => $4::int)
         order by m.dispatched_at limit 1) is not null
     or ($5::int > 0 and (select true from spent_idempotency_keys k
                          where k.spent_at < clock.now - make_interval(secs => $5::int)
                          order by k.spent_at limit 1) is not null)
     -- A rate line past by the retention (issue 16; a slot row goes with its
     -- key's last task, which the purge of tasks deletes in the same sweep).
     or (select true from rate_limits r where r.next_claim_at < clock.now - make_interval(secs => $3::int)
         order by r.next_claim_at limit 1) is not null
     or (select true from rate_start_lines r where r.next_start_at < clock.now - make_interval(secs => $3::int)
         order by r.next_start_at limit 1) is not null
     -- reap: expired leases (last, see above)
     or (select true from tasks t where t.status = 'running' and t.lease_expires_at < clock.now
         order by t.id limit 1) is not null
     as due
   from clock`,
);

/** Whether any step of the sweep has work (false: the tick is idle). */
export async function probeDueWork(
  q: Queryable,
  p: { now?: Now; lookaheadSeconds: number; retentionSeconds: number; markRetentionSeconds: number; spentKeyRetentionSeconds: number },
): Promise<boolean> {
  const rows = await q.query<{ due: boolean }>(sweepProbeDueWork, [
    at(p.now),
    p.lookaheadSeconds,
    p.retentionSeconds,
    p.markRetentionSeconds,
    p.spentKeyRetentionSeconds,
  ]);
  return rows[0]!.due;
}
