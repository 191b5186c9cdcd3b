// Concurrency slots and rate limits (issue 16): what a tenant's keys hold.
// The claim and the fenced start write them, and every statement that takes a
// task out of `running` frees its slot (freeSlotsOf); this file reads them,
// and the purge forgets the keys left idle.
import type { Db, Queryable } from '../seam.ts';
import { sql } from '../seam.ts';

/**
 * slot_limit_of_newest: a key's limit is the one its newest task says
 * (README: the most recently enqueued task's limit applies), so every
 * statement that creates tasks writes it: the enqueue, a schedule's
 * occurrences, a trigger and a replay. CTE `slot_limits` upserts the slot row
 * of each (tenant, key) of `rows` (columns tenant, key, max_running, ord; the
 * newest has the highest ord), in (tenant, key) order, as the claims lock
 * them. Written by the enqueue alone, a schedule replaced with a lower limit
 * ran its occurrences at the old one.
 */
export const slotLimitsOf = (rows: string) => `slot_limits as (
     insert into concurrency_slots as s (tenant, key, max_running)
     select distinct on (n.tenant, n.key) n.tenant, n.key, n.max_running
     from ${rows} n where n.key is not null
     order by n.tenant, n.key, n.ord desc
     on conflict (tenant, key) do update set max_running = excluded.max_running, updated_at = now()
   )`;

/**
 * The slot freeing of every set-based statement that takes tasks out of
 * `running` (migration 0020; the enqueue's ON CONFLICT calls the function
 * itself): CTE `slots_freed` gives back one slot per row of `left` (columns
 * tenant, concurrency_key), which must hold exactly the rows the statement
 * took out of `running`, as they were (a key they carried then). One call of
 * concurrency_slots_free per key: a ledger insert, and the wake of as many
 * parked tasks. The group by reads `left` whole before the first call, so
 * the wake runs after the statement's own writes to those rows. The
 * statement must read `slots_freed` (a CTE nobody reads never runs).
 */
export const freeSlotsOf = (left: string) => `slots_freed as (
     select count(concurrency_slots_free(f.tenant, f.key, f.n, null)) as keys
     from (select l.tenant, l.concurrency_key as key, count(*)::int as n from ${left} l
           where l.concurrency_key is not null
           group by l.tenant, l.concurrency_key
           order by l.tenant, l.concurrency_key) f
   )`;

/**
 * The frees of slot row `s` no claim has counted yet (migration 0018's
 * ledger): the row's running count less them is what its key runs now.
 */
export const UNCOUNTED_FREES = `coalesce((select sum(f.n)::int from concurrency_frees f where f.tenant = s.tenant and f.key = s.key), 0)`;

/** What slot row `s`'s key runs now: its running count less UNCOUNTED_FREES, never below none. */
export const RUNNING_NOW = `greatest(0, s.running - ${UNCOUNTED_FREES})`;

/**
 * The concurrency key `key` of tenant `tenant` has no free slot (its slot
 * row less the frees no claim has counted yet). A key is full only while its
 * row's running count reaches its limit. Asked of the slot row's primary key,
 * per task: as a set of every full key, it read concurrency_slots whole, and
 * beside 200,000 keys in use its estimate took every claim's cost past
 * jit_above_cost (3.3 s of JIT compilation for a claim of 500 plain tasks).
 */
export const keyIsFull = (tenant: string, key: string) => `exists (select 1 from concurrency_slots s
                  where s.tenant = ${tenant} and s.key = ${key} and s.running >= s.max_running
                    and s.running - ${UNCOUNTED_FREES} >= s.max_running)`;

/**
 * parked_if_key_full: a task made runnable (`runnable`) under a concurrency
 * key that is full goes in parked, out of the runnable index, by the
 * enqueue and the promote; a freed slot wakes it (freeSlotsOf, the sweep's
 * tasks_wake_parked). Runnable, it was read by every claim while the key
 * stayed full: a claim that found nothing else read the key's whole backlog
 * (239 ms beside 199,000 waiting, BENCHMARKS.md, issue 16, eighth pass), and
 * one tenant's steady stream into a saturated key grew that without bound.
 * The key's tasks already runnable when it filled stay so (a claim parks
 * those it passes over to reach other work). A free that commits while the
 * task is being written does not see it: the sweep's wake takes it then.
 */
export const parkedIfKeyFull = (runnable: string, tenant: string, key: string) =>
  `(${runnable} and ${key} is not null and ${keyIsFull(tenant, key)})`;

export interface ConcurrencySlot {
  key: string;
  running: number;
  limit: number;
  /** Due tasks of this key not claimed yet (queued: held back by the limit, or parked). */
  waiting: number;
}

/**
 * One key of one tenant: its slot row (no lock) less the frees no claim has
 * counted yet (migration 0018), and its due tasks not claimed yet, counted on
 * tasks_concurrency_key_waiting_idx.
 */
const concurrencySlotGet = sql(
  'concurrency_slot_get',
  `select s.key,
          ${RUNNING_NOW} as running,
          s.max_running,
          (select count(*)::int from tasks p
           where p.status = 'queued' and p.tenant = s.tenant and p.concurrency_key = s.key) as waiting
   from concurrency_slots s
   where s.tenant = $1::text and s.key = $2::text`,
);

export async function getConcurrencySlot(q: Queryable, p: { tenant: string; key: string }): Promise<ConcurrencySlot | null> {
  const rows = await q.query<{ key: string; running: number; max_running: number; waiting: number }>(concurrencySlotGet, [
    p.tenant,
    p.key,
  ]);
  const r = rows[0];
  return r ? { key: r.key, running: r.running, limit: r.max_running, waiting: r.waiting } : null;
}

export interface RateLimitState {
  key: string;
  limit: number;
  periodSeconds: number;
  /** The earliest instant the key's next task may start; null: now. */
  nextStartAt: Date | null;
  /** Tasks of this key that have not started (scheduled, queued, or claimed and not started). */
  waiting: number;
}

/**
 * One rate-limited key of one tenant: its line (no lock) and its tasks not
 * started yet (the count reads the tenant's waiting tasks by
 * tasks_pending_tenant_idx and the claimed ones by tasks_running_idx; a
 * debugging read, not a hot path).
 */
const rateLimitGet = sql(
  'rate_limit_get',
  `select l.key, l.max_starts, l.period_seconds,
          case when sl.next_start_at > coalesce($3::timestamptz, now()) then sl.next_start_at end as next_start_at,
          (select count(*)::int from tasks p
           where p.tenant = l.tenant and p.rate_key = l.key and p.status in ('scheduled', 'queued'))
          + (select count(*)::int from tasks p
             where p.tenant = l.tenant and p.rate_key = l.key and p.status = 'running' and p.started_at is null) as waiting
   from rate_limits l left join rate_start_lines sl on sl.tenant = l.tenant and sl.key = l.key
   where l.tenant = $1::text and l.key = $2::text`,
);

export async function getRateLimit(q: Queryable, p: { tenant: string; key: string; now?: Date }): Promise<RateLimitState | null> {
  const rows = await q.query<{ key: string; max_starts: number; period_seconds: number; next_start_at: Date | null; waiting: number }>(
    rateLimitGet,
    [p.tenant, p.key, p.now ?? null],
  );
  const r = rows[0];
  return r
    ? { key: r.key, limit: r.max_starts, periodSeconds: r.period_seconds, nextStartAt: r.next_start_at, waiting: r.waiting }
    : null;
}

type Now = Date | null | undefined;

/** A tenant's flow-control key. */
export interface FlowKey {
  tenant: string;
  key: string;
}

/** A task of the key still waits for a slot (tasks_concurrency_key_waiting_idx's predicate). */
const WAITING_OF_KEY = `t.status in ('scheduled', 'queued')`;

/**
 * Step 1 of the purge of idle keys (migrations 0022, 0033): locks the slot
 * rows of the candidate keys (`$2`, `$3`) that are idle, SKIP LOCKED (a
 * claim or an enqueue holding the row is using the key). idle_key: nothing
 * of the key runs (the row's running count is all freed: each task leaving
 * `running` writes a free) and nothing waits (no scheduled or queued task,
 * asked of tasks_concurrency_key_waiting_idx). This statement's snapshot may
 * predate an enqueue that committed since; step 2 checks again under the
 * locks.
 *
 * idle_slots_from_candidates: the candidates are the keys of the tasks the
 * sweep's purge just deleted (finished past retention: their key is idle
 * unless newer tasks use it). Asked of every slot row, the check read every
 * key's row and hashed every keyed task each busy sweep (69 ms at 100,000
 * keys of one task each). A key whose last task went otherwise (a
 * schedule's pause withdrew it) or whose row was locked when its last task
 * went keeps an idle row, running nothing, until the key is used again.
 * Each candidate is looked up by the primary key in a lateral of its own:
 * joined to the unnest, the planner read the slot table whole (custom) or
 * rescanned the candidates for every slot row (generic).
 */
const slotsLockIdle = sql(
  'concurrency_slots_lock_idle',
  `select l.tenant, l.key
   from unnest($2::text[], $3::text[]) as c(tenant, key)
   cross join lateral (
     select s.tenant, s.key from concurrency_slots s
     where s.tenant = c.tenant and s.key = c.key
       and s.running <= ${UNCOUNTED_FREES}
       and not exists (select 1 from tasks t where t.tenant = s.tenant and t.concurrency_key = s.key and ${WAITING_OF_KEY})
     for update of s skip locked
   ) l
   limit $1::int`,
);

/** Step 1 alone: the candidate keys' slot rows that are idle, locked (tests read its plan). */
export async function lockIdleSlots(q: Queryable, p: { limit: number; keys: readonly FlowKey[] }): Promise<FlowKey[]> {
  return q.query<FlowKey>(slotsLockIdle, [p.limit, p.keys.map((k) => k.tenant), p.keys.map((k) => k.key)]);
}

/**
 * Step 2, in the same transaction with a fresh snapshot: every enqueue or
 * claim that wrote a locked slot row committed before step 1 took it (later
 * ones wait for this transaction), so a task of the key committed by then is
 * seen here, and the row's running count is final. Deletes the locked slot
 * rows whose key is still idle (its running count equals the frees taken
 * here, and no task of it waits), with those frees: nothing holds a slot,
 * and the next enqueue writes its limit afresh, as on first use. A free
 * committed after this snapshot cannot come: only a running task writes
 * one, and none is left. The frees are taken SKIP LOCKED (a claim locks them
 * before it waits for the slot row this transaction holds); a key with a
 * free taken by someone else is kept for a later purge: its running count
 * exceeds the frees taken here (the frees never exceed the count).
 *
 * Also a bounded batch of rate rows (rate_limits, the claim line) and of
 * start lines (rate_start_lines, migration 0023) whose line is more than $2
 * seconds (the retention) in the past, SKIP LOCKED against the claims and
 * starts: they place each start at greatest(line, its due time, never before
 * now), so a line in the past spaces nothing and a missing row (line
 * -infinity) is the same. The margin keeps that true for a statement whose
 * clock lags the purge's. purge_reads_by_age (migration 0029): each line
 * table is read oldest first by its index on the line, bounded by it, so a
 * purge that finds nothing reads no row of 100,000 keys in use, whatever
 * the statistics say of the lines' age.
 */
const flowControlPurgeIdle = sql(
  'flow_control_purge_idle',
  `with locked as (select * from unnest($4::text[], $5::text[]) as k(tenant, key)),
   frees as (
     select f.id, f.tenant, f.key, f.n from concurrency_frees f join locked k on k.tenant = f.tenant and k.key = f.key
     for update of f skip locked
   ),
   idle_slots as (
     select k.tenant, k.key from locked k join concurrency_slots s on s.tenant = k.tenant and s.key = k.key
     where s.running = (select coalesce(sum(x.n), 0) from frees x where x.tenant = k.tenant and x.key = k.key)
       and not exists (select 1 from tasks t where t.tenant = k.tenant and t.concurrency_key = k.key and ${WAITING_OF_KEY})
   ),
   slots_purged as (
     delete from concurrency_slots s using idle_slots i
     where s.tenant = i.tenant and s.key = i.key
     returning s.tenant, s.key
   ),
   frees_purged as (
     delete from concurrency_frees f using frees x join slots_purged p on p.tenant = x.tenant and p.key = x.key
     where f.id = x.id
   ),
   idle_rates as (
     select r.ctid as tid from rate_limits r
     where r.next_claim_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)
     order by r.next_claim_at
     limit $3::int
     for update of r skip locked
   ),
   -- purge_by_ids: by the locked rows' addresses (joined on the key, a
   -- generic plan hashed a seq scan of every line kept). A row is locked
   -- here, so it cannot move before the delete. One a claim moved after this
   -- statement's snapshot is locked at its newest version, whose address the
   -- delete's snapshot cannot see: it is kept for a later purge, never
   -- deleted wrongly (seen by hand, PostgreSQL 15).
   rates_purged as (
     delete from rate_limits l where l.ctid = any(array(select i.tid from idle_rates i))
     returning 1
   ),
   idle_start_lines as (
     select r.ctid as tid from rate_start_lines r
     where r.next_start_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)
     order by r.next_start_at
     limit $3::int
     for update of r skip locked
   ),
   start_lines_purged as (
     delete from rate_start_lines l where l.ctid = any(array(select i.tid from idle_start_lines i))
   )
   select (select count(*)::int from slots_purged) as slots, (select count(*)::int from rates_purged) as rates`,
);

/**
 * Forgets flow-control keys left idle (issue 16): slot rows (and their frees)
 * of keys with nothing running or waiting, and rate rows whose lines are past by the
 * retention. At most `limit` of each; one transaction of two statements.
 */
export async function purgeIdleFlowControl(
  db: Db,
  p: { now?: Now; retentionSeconds: number; limit: number; keys: readonly FlowKey[] },
): Promise<{ slots: number; rates: number }> {
  return db.transaction(async (tx) => {
    const locked = p.keys.length > 0 ? await lockIdleSlots(tx, p) : [];
    const [r] = await tx.query<{ slots: number; rates: number }>(flowControlPurgeIdle, [
      p.now ?? null,
      p.retentionSeconds,
      p.limit,
      locked.map((s) => s.tenant),
      locked.map((s) => s.key),
    ]);
    return { slots: r!.slots, rates: r!.rates };
  });
}
