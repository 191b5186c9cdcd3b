// Dispatch, run by the sweep: claim a fair batch, mark it handed to the
// Queue, release what could not be sent, wake parked tasks of a freed
// concurrency key. Conventions: tasks-shared.ts.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import { freeSlotsOf, keyIsFull, RUNNING_NOW } from './concurrency.ts';
import { at, batchRows, lostFromRow, type LostFence, type LostRow, type Now } from './tasks-shared.ts';

/** Queues that are not paused and hold runnable work. */
const queuesListClaimable = sql(
  'queues_list_claimable',
  `select q.name from queues q
   where not q.paused and exists (select 1 from tasks t where t.queue = q.name and t.status = 'queued' and not t.parked)
   order by q.name`,
);

export async function listClaimableQueues(q: Queryable): Promise<string[]> {
  return (await q.query<{ name: string }>(queuesListClaimable)).map((r) => r.name);
}

export interface ClaimedTask {
  id: string;
  epoch: number;
  runAt: Date;
  /** How long after the claim the task is due (0 when already due). */
  delayMs: number;
  /** The W3C traceparent it was enqueued with, for the sweep's log lines. */
  traceparent: string | null;
  /** The claim statement's token (one per claimed batch), which the dispatch mark names. */
  claimToken: string;
  /** It has a rate limit: its message says so, and the fenced start takes the statement with the lines. */
  rated: boolean;
}

/** claim_skips_full_keys: task `t`'s concurrency key has no free slot (keyIsFull). */
const KEY_IS_FULL = keyIsFull('t.tenant', 't.concurrency_key');

/**
 * claim_passes_busy_keys: the most keys a claim tries a turn on (each turn
 * it gets is an entry in the shared lock table until it commits).
 */
const KEY_TURNS = 32;
/** The advisory lock's first key (the second is the hash of tenant and key). */
const KEY_TURN_LOCK = 16_001;
/** Task `t`'s concurrency key is not another claim's turn (key_turns). */
const KEY_NOT_BUSY = `(t.tenant, t.concurrency_key) not in (select b.tenant, b.key from key_turns b where not b.mine)`;

/**
 * Claims the lowest-vtime runnable tasks of one queue: locks them with SKIP
 * LOCKED (overlapping sweeps take disjoint sets), marks them `running` with a
 * bumped epoch, an attempt counted and a lease that covers the wait until
 * their run_at, and advances the queue's virtual clock, all in one statement.
 * Every task of the batch carries the batch's claim token, which the sweep's
 * dispatch mark names. A paused queue yields nothing.
 *
 * Priorities (issue 16, `best`): the lowest vtimes are the slots each tenant
 * earned in this batch (`slots`); each tenant fills its k slots with its k
 * best runnable tasks by priority, then due time (tasks_runnable_priority_idx,
 * read only up to k per tenant). A chosen task takes a slot's vtime and a
 * displaced one takes the chosen task's old vtime, so the tenant's vtimes,
 * and with them its weighted share, are exactly what they were. With no
 * priorities and tasks made runnable in due order, the best tasks are the
 * slots themselves and nothing moves.
 *
 * Concurrency keys (issue 16, `slot_counts`): the chosen tasks' keys take
 * their slots in one upsert per key, in (tenant, key) order. ON CONFLICT DO
 * UPDATE locks the slot row and reads its latest committed count, so
 * overlapping claims serialize per key and never grant more than
 * `max_running`. Within a key the lowest vtimes get the granted slots; the
 * rest are held back: they stay runnable and unwritten, and the batch's
 * other keys and tenants are claimed in the same statement.
 *
 * A claim takes no more of a key than its free slots (issue 16,
 * claim_skips_full_keys): the scans pass over the tasks of a key with no
 * free slot (KEY_IS_FULL), so they are neither locked nor written while
 * nothing waits behind them. The ones a claim passes over to reach its
 * batch are `parked` (park_passed_full_keys, at most a batch per claim,
 * lowest vtimes first): out of the runnable index, later claims do not read
 * them again, and a freed slot wakes them (freeSlotsOf). Parking every task
 * a claim held back cost two row versions each (the park and the wake): the
 * drain under one key of limit 1,000 ran at 0.71-0.75x the plain drain, and
 * at 0.89-0.92x once only passed-over tasks are parked (BENCHMARKS.md,
 * issue 16, sixth pass). A task made runnable while its key is full is
 * parked from the start (parked_if_key_full, concurrency.ts).
 *
 * claim_priority_scan_in_order (issue 12): the priority scan is a
 * subquery whose own limit is the batch ($3, a constant), with the tenant's
 * share (not a constant) applied outside it. Written as one query limited by
 * the share, its plan beside a long history turned into a bitmap over every
 * queued task of the tenant, sorted (the planner prices a limit it cannot
 * read as a tenth of the rows): 132 of a claim's 149 ms beside 1,000,000
 * finished rows and 20,000 queued; 16 ms as it is now (BENCHMARKS.md,
 * latest results). Its test found the same plan beside 300,000.
 *
 * claim_passes_busy_keys (issue 16): claims running at once (two sweep
 * loops, the pumps) take turns on a nearly full concurrency key. Each claim
 * tries a turn (`key_turns`: a transaction-scoped advisory lock, tried, never
 * waited for) on the keys of the first batch of runnable tasks it reads that
 * have room for fewer than two batches, at most KEY_TURNS of them, and its
 * scans pass over the tasks of the keys whose turn another claim holds:
 * neither locked, written nor counted as held. Without the turns the second
 * claim locked a batch of the key, waited on the first's slot row until it
 * committed, found the key full and held them all back: under one key of
 * limit 1,000 and two sweep loops, 12,600-16,200 holds per 20,000 tasks,
 * 1,414-1,492 B of WAL per task against 1,310-1,340 with turns, 6-8 % of
 * busy samples waiting on a lock against 1 % (BENCHMARKS.md, issue 16,
 * eighth pass). The turns are tried once, before either scan reads a keyed
 * task, so both scans agree on them. A key with room for two batches takes
 * no turn: claims at once both get slots of it. Rate keys take none either:
 * a second claim of a rate key is served (its places follow the first's on
 * the line), so passing over them idled the second sweep loop (rated drain
 * 0.70-0.72x against 0.82-0.87x in one A/B). A claim that claims anything
 * still waits for another claim of its queue at the end, on the queue's row
 * (`advanced`).
 *
 * Rate limits (issue 16, `rate_lines`, migration 0018): each rate-limited
 * task of the batch is reserved a start on its key's claim line (GCRA
 * without bursts: a step of period / limit after the previous reservation,
 * never before its due time) and sent for it (run_at moves there). A
 * reservation beyond the look-ahead ($7) is not taken: the task goes back to
 * `scheduled` at that time (no attempt spent) and counts with the held back
 * in the returned count, so the sweep keeps claiming past it. Rate is decided
 * before concurrency: a reserved task the key's slots then hold back leaves a
 * gap in the line (fewer starts, never more).
 *
 * Two statements from this one text (issue 12), as the fenced start has:
 * `flow` is the whole of it; without, the flow-control CTEs (the key turns,
 * the rate lines, the slot counts, the parks) are left out. A Worker plans
 * every statement afresh: without them a claim of 500 plain tasks costs
 * 11.1 ms of backend CPU against 14.8, and 9.6 against 13.5 ms on a pooled
 * connection (generic plans); in the drain, 21-23 µs per task against 29-33
 * (BENCHMARKS.md, issue 12, sixteenth pass). plain_claim_leaves_flow_control: the plain
 * statement writes nothing when its batch holds a task with a concurrency
 * key or a rate limit; it says so (`flow`), and claimTasks runs the whole
 * statement. Which one a queue's claim tries first is a hint
 * (claimBatch, sweep.ts), never a guard.
 */
const claimStatement = (flow: boolean) => `with clock as (select coalesce($1::timestamptz, now()) as now),${flow ? `
   -- claim_passes_busy_keys: a turn tried, once, on each nearly full key of
   -- the first batch of runnable tasks (read unlocked, as far as the scans
   -- would go).
   key_turns as materialized (
     select k.tenant, k.key, pg_try_advisory_xact_lock(${KEY_TURN_LOCK}, hashtext(k.tenant || '/' || k.key)) as mine
     from (select d.tenant, d.key
           from (select distinct w.tenant, w.concurrency_key as key
                 from (select p.tenant, p.concurrency_key from tasks p
                       where p.status = 'queued' and not p.parked and p.queue = $2::text
                       order by p.vtime, p.id
                       limit $3::int) w
                 where w.concurrency_key is not null) d
           where exists (select 1 from concurrency_slots s
                         where s.tenant = d.tenant and s.key = d.key
                           and s.max_running - ${RUNNING_NOW} < 2 * $3::int)
           limit ${KEY_TURNS}) k
   ),` : ''}
   slots as (
     select t.id, t.tenant, t.vtime, t.concurrency_key, t.rate_key from tasks t
     where t.status = 'queued' and not t.parked and t.queue = $2::text
       and not exists (select 1 from queues q where q.name = $2::text and q.paused)${flow ? `
       and (t.concurrency_key is null or (not ${KEY_IS_FULL} and ${KEY_NOT_BUSY}))` : ''}
     order by t.vtime, t.id
     limit $3::int
     for update of t skip locked
   ),
   shares as (select tenant, count(*)::int as k from slots group by tenant),
   best_locked as (
     -- claim_priority_scan_in_order: a subquery limited to the batch (a
     -- constant), reading the tenant's runnable tasks in the priority
     -- index's order; the tenant's share stops it from outside (a Limit
     -- pulls no row past it, so no row past the share is locked).
     select b.* from shares s cross join lateral (
       select l.* from (
         select t.id, t.tenant, t.priority, t.run_at, t.vtime, t.concurrency_key, t.concurrency_limit,
                t.rate_key, t.rate_limit, t.rate_period_seconds from tasks t
         where t.status = 'queued' and not t.parked and t.queue = $2::text and t.tenant = s.tenant${flow ? `
           and (t.concurrency_key is null or (not ${KEY_IS_FULL} and ${KEY_NOT_BUSY}))` : ''}
         order by t.priority desc, t.run_at, t.id
         limit $3::int
         for update of t skip locked) l
       limit s.k) b
     -- At most the batch (the shares sum to it): no change, but the planner
     -- then estimates the batch, not 600 rows per tenant, and keeps the
     -- statement's cost under jit_above_cost (JIT compiled it in 4 s).
     limit $3::int
   ),
   -- plain_claim_leaves_flow_control: whether the batch holds a task with
   -- flow control (a concurrency key or a rate limit).
   flow_seen as (
     select exists (select 1 from slots where concurrency_key is not null or rate_key is not null)
            or exists (select 1 from best_locked where concurrency_key is not null or rate_key is not null) as seen
   ),
   best as (
     select b.*, row_number() over (partition by b.tenant order by b.priority desc, b.run_at, b.id) as rank
     from best_locked b
   ),
   slot_vtimes as (
     select s.tenant, s.vtime, row_number() over (partition by s.tenant order by s.vtime, s.id) as rank from slots s
   ),
   picked as (
     select b.id, b.tenant, b.concurrency_key, b.concurrency_limit, coalesce(v.vtime, b.vtime) as vtime,
            b.run_at, b.rate_key, b.rate_limit, b.rate_period_seconds
     from best b left join slot_vtimes v on v.tenant = b.tenant and v.rank = b.rank
   ),
   displaced as (
     select d.id, f.vtime from (
       select s.id, s.tenant, row_number() over (partition by s.tenant order by s.vtime, s.id) as r
       from slots s where s.id not in (select id from best)) d
     join (
       select b.tenant, b.vtime, row_number() over (partition by b.tenant order by b.vtime, b.id) as r
       from best b where b.id not in (select id from slots)) f on f.tenant = d.tenant and f.r = d.r
   ),
   reordered as (
     update tasks t set vtime = d.vtime, updated_at = clock.now
     from displaced d, clock
     where t.id = d.id${flow ? '' : ' and not (select seen from flow_seen)'}
   ),${flow ? `
   -- rate_limit_of_newest (migration 0032): one row per key of the batch,
   -- whose limit is its newest task's: the batch's newest, unless the key's
   -- row holds a newer one's.
   rate_keys as (
     select n.tenant, n.rate_key,
            case when k.limit_task_id > n.id then k.max_starts else n.rate_limit end as max_starts,
            case when k.limit_task_id > n.id then k.period_seconds else n.rate_period_seconds end as period_seconds,
            greatest(n.id, k.limit_task_id) as limit_task_id
     from (select p.tenant, p.rate_key, p.id, p.rate_limit, p.rate_period_seconds
           from picked p
           -- Each key's newest of the batch (hashed: no sort of the batch).
           where p.id in (select max(x.id) from picked x where x.rate_key is not null group by x.tenant, x.rate_key)) n
          left join rate_limits k on k.tenant = n.tenant and k.key = n.rate_key
   ),
   -- GCRA without bursts: each task's place in its key's line (pos, in due
   -- order) and base, the earliest first start of the key's tasks up to pos
   -- such that none of them, a step apart (rate_limit_step, migration 0018),
   -- starts before its due time.
   -- (The running max in the order that numbered them, so one sort serves both.)
   rate_base as (
     select r.*, max(r.due - (r.pos - 1) * r.step) over (partition by r.tenant, r.rate_key order by r.run_at, r.vtime, r.id) as base
     from (select p.id, p.tenant, p.rate_key, p.run_at, p.vtime, greatest(p.run_at, clock.now) as due,
                  rate_limit_step(k.max_starts, k.period_seconds) as step,
                  row_number() over (partition by p.tenant, p.rate_key order by p.run_at, p.vtime, p.id) as pos
           from picked p join rate_keys k on k.tenant = p.tenant and k.rate_key = p.rate_key, clock) r
   ),
   rate_groups as (
     select k.tenant, k.rate_key, k.max_starts, k.period_seconds, k.limit_task_id,
            rate_limit_step(k.max_starts, k.period_seconds) as step, b.bases
     from rate_keys k
          join (select b.tenant, b.rate_key, array_agg(b.base order by b.pos) as bases
                from rate_base b group by b.tenant, b.rate_key) b on b.tenant = k.tenant and b.rate_key = k.rate_key
   ),
   -- reserve_within_lookahead: only starts the look-ahead may send move the
   -- line (rate_limit_line_after, migration 0018).
   rate_lines as (
     insert into rate_limits as l (tenant, key, max_starts, period_seconds, limit_task_id, next_claim_at)
     select g.tenant, g.rate_key, g.max_starts, g.period_seconds, g.limit_task_id,
            rate_limit_line_after('-infinity', g.bases, g.step, clock.now + make_interval(secs => $7::int))
     from rate_groups g, clock
     order by g.tenant, g.rate_key
     on conflict (tenant, key) do update set
       -- A claim that committed since rate_keys read the row may have set
       -- a newer task's limit: it stays (the start line spaces by it).
       max_starts = case when excluded.limit_task_id >= l.limit_task_id then excluded.max_starts else l.max_starts end,
       period_seconds = case when excluded.limit_task_id >= l.limit_task_id then excluded.period_seconds else l.period_seconds end,
       limit_task_id = greatest(excluded.limit_task_id, l.limit_task_id),
       claim_from = l.next_claim_at,
       next_claim_at = rate_limit_line_after(
         l.next_claim_at,
         (select g.bases from rate_groups g where g.tenant = l.tenant and g.rate_key = l.key),
         rate_limit_step(excluded.max_starts, excluded.period_seconds),
         (select now from clock) + make_interval(secs => $7::int)),
       updated_at = now()
     returning l.tenant, l.key, l.claim_from
   ),
   rated as (
     select p.*, r.start_at, coalesce(r.start_at > clock.now + make_interval(secs => $7::int), false) as deferred
     from picked p
     left join (select b.id, greatest(g.claim_from, b.base) + (b.pos - 1) * b.step as start_at
                from rate_base b join rate_lines g on g.tenant = b.tenant and g.key = b.rate_key) r on r.id = p.id,
     clock
   ),
   wanted as (
     select tenant, concurrency_key as key, count(*)::int as n, max(concurrency_limit) as max_running
     from rated where concurrency_key is not null and not deferred group by tenant, concurrency_key
   ),
   -- Slots freed since the last claim of these keys (migration 0018's
   -- ledger): taken with SKIP LOCKED, so each is counted by exactly one
   -- claim and a claim never waits for another's; one committed after this
   -- statement's snapshot counts at the next claim (never over the limit).
   freed_rows as (
     delete from concurrency_frees f
     where f.id in (select x.id from concurrency_frees x join wanted w on w.tenant = x.tenant and w.key = x.key
                    order by x.id
                    for update of x skip locked)
     returning f.tenant, f.key, f.n
   ),
   freed as (select tenant, key, sum(n)::int as n from freed_rows group by tenant, key),
   slot_counts as (
     insert into concurrency_slots as s (tenant, key, max_running, running, granted)
     select w.tenant, w.key, w.max_running, least(w.n, w.max_running), least(w.n, w.max_running)
     from wanted w order by w.tenant, w.key
     on conflict (tenant, key) do update set
       granted = greatest(0, least((select w.n from wanted w where w.tenant = s.tenant and w.key = s.key),
                                   s.max_running - greatest(0, s.running - coalesce(
                                     (select f.n from freed f where f.tenant = s.tenant and f.key = s.key), 0)))),
       running = greatest(0, s.running - coalesce((select f.n from freed f where f.tenant = s.tenant and f.key = s.key), 0))
                 + greatest(0, least((select w.n from wanted w where w.tenant = s.tenant and w.key = s.key),
                                     s.max_running - greatest(0, s.running - coalesce(
                                       (select f.n from freed f where f.tenant = s.tenant and f.key = s.key), 0)))),
       updated_at = now()
     returning s.tenant, s.key, s.granted
   ),
   decided as (
     select p.id, p.vtime, p.start_at, p.deferred,
            not p.deferred
            and (p.concurrency_key is null
                 or row_number() over (partition by p.tenant, p.concurrency_key, p.deferred order by p.vtime, p.id)
                    <= coalesce(g.granted, 0)) as takes_slot
     from rated p left join slot_counts g on g.tenant = p.tenant and g.key = p.concurrency_key
   ),
   -- Over their key's slots (granted to lower vtimes): they stay runnable,
   -- unwritten unless the priority order gave them another vtime; their key
   -- is full now, so the next claims pass over them.
   held as (
     update tasks t set vtime = d.vtime, updated_at = clock.now
     from decided d, clock
     where t.id = d.id and not d.takes_slot and not d.deferred and t.vtime <> d.vtime
   ),
   -- park_passed_full_keys: the tasks of full keys this claim's scan passed
   -- over to reach its batch leave the runnable index (parked), at most a
   -- batch of them per claim, lowest first, so later claims read fewer of
   -- them again; a freed slot wakes them (freeSlotsOf). A full key's tasks
   -- with nothing claimable behind them are not written.
   -- (Lateral from the batch's last slot: with no slot, nothing is read.)
   passed as (
     select p.id from (select s.vtime, s.id from slots s order by s.vtime desc, s.id desc limit 1) l
     cross join lateral (
       select t.id from tasks t
       where t.status = 'queued' and not t.parked and t.queue = $2::text and (t.vtime, t.id) < (l.vtime, l.id)
         and t.concurrency_key is not null and ${KEY_IS_FULL}
       order by t.vtime, t.id
       limit $3::int
       for update of t skip locked) p
   ),
   -- By id (joined, it hashed tasks whole beside a backlog of 10,000).
   parked as (
     update tasks t set parked = true, updated_at = clock.now
     from clock
     where t.id = any(array(select x.id from passed x))
     returning t.id
   ),
   -- Over its key's rate beyond the look-ahead: back to scheduled at the time
   -- the line allows (no attempt spent); the promote brings it back.
   deferred as (
     update tasks t set status = 'scheduled', run_at = d.start_at, vtime = null, updated_at = clock.now
     from decided d, clock
     where t.id = d.id and d.deferred
   ),` : `
   -- plain_claim_leaves_flow_control: a batch with flow control is not
   -- claimed here (nothing written; claimTasks runs the whole statement).
   decided as (
     select p.id, p.vtime, null::timestamptz as start_at, false as deferred, true as takes_slot
     from picked p where not (select seen from flow_seen)
   ),`}
   -- updates_by_id (tasks-shared.ts), in the plain statement. Not in the
   -- whole one: there PostgreSQL 18's generic plan of a keyed batch looked
   -- the claimed ids up again for each claimed task (80,200 rows visited for
   -- 400), where joined alone it looks each up once (BENCHMARKS.md).
   claimed as (
     update tasks t set
       status = 'running',
       vtime = d.vtime,
       attempts = t.attempts + 1,
       lease_epoch = t.lease_epoch + 1,
       claimed_by = $4::text,
       claim_token = $6::uuid,
       run_at = coalesce(d.start_at, t.run_at),
       lease_expires_at = greatest(coalesce(d.start_at, t.run_at), clock.now) + make_interval(secs => $5::int),
       dispatched_at = null,
       started_at = null,
       updated_at = clock.now
     from decided d, clock
     where ${flow ? '' : 't.id = any(array(select x.id from decided x where x.takes_slot)) and '}t.id = d.id and d.takes_slot
     returning t.id, t.lease_epoch, t.run_at, t.vtime, t.traceparent, t.rate_key, t.rate_key is not null as rated,
               greatest(0, floor(extract(epoch from t.run_at - clock.now) * 1000))::bigint as delay_ms
   ),
   advanced as (
     update queues q set vclock = greatest(q.vclock, m.v)
     from (select max(vtime) as v from claimed) m
     where q.name = $2::text and m.v is not null
   )
   -- rated_sent_by_key: the rate-limited tasks go out after the rest, a
   -- key's together (in vtime order within it), so a consumer's batch starts
   -- on few keys' start lines: each line a start takes is a row lock other
   -- consumers' starts of that key wait on until it commits (issue 16,
   -- seventh pass). Unrated tasks keep their vtime order.
   (select id, lease_epoch, run_at, delay_ms, traceparent, rated, null::int as held, null::boolean as flow from claimed
    order by rate_key collate "C" nulls first, vtime, id)
   union all
   -- How many were held back (over a key's slots or its rate, or parked):
   -- the sweep keeps claiming while claimed + held fill batches.
   select null, null, null, null, null, null,
          ${flow ? '(select count(*)::int from decided where not takes_slot) + (select count(*)::int from parked)' : '0'} as held,
          -- Flow control met: the whole statement claims this queue next. The
          -- whole one also keeps it when it claimed nothing (a full key's
          -- tasks, passed over, are in none of its scans): the plain one
          -- would meet them and hand over, one statement more per claim.
          (select seen from flow_seen)${flow ? ' or exists (select 1 from passed) or not exists (select 1 from claimed)' : ''} as flow`;

const tasksClaimRunnable = sql('tasks_claim_runnable', claimStatement(true));
const tasksClaimRunnablePlain = sql('tasks_claim_runnable_plain', claimStatement(false));

export async function claimTasks(
  q: Queryable,
  p: {
    now?: Now;
    queue: string;
    limit: number;
    claimedBy: string;
    leaseSeconds: number;
    claimToken?: string;
    /** How far ahead a rate-limited task may be reserved a start (the look-ahead); default 60. */
    lookaheadSeconds?: number;
    /**
     * The queue's last claim met flow control: the whole statement at once.
     * Otherwise the plain one first, and the whole one only if the batch
     * turns out to hold flow control (a hint, never a guard).
     */
    flow?: boolean;
  },
): Promise<{ claimed: ClaimedTask[]; held: number; flow: boolean }> {
  const claimToken = p.claimToken ?? crypto.randomUUID();
  const rows = await q.query<{
    id: string | null;
    lease_epoch: string;
    run_at: Date;
    delay_ms: string;
    traceparent: string | null;
    rated: boolean | null;
    held: number | null;
    flow: boolean | null;
  }>(p.flow ? tasksClaimRunnable : tasksClaimRunnablePlain, [
    at(p.now),
    p.queue,
    p.limit,
    p.claimedBy,
    p.leaseSeconds,
    claimToken,
    ...(p.flow ? [p.lookaheadSeconds ?? 60] : []),
  ]);
  const last = rows.find((r) => r.id === null);
  if (!p.flow && last?.flow) return claimTasks(q, { ...p, claimToken, flow: true });
  const claimed = rows
    .filter((r) => r.id !== null)
    .map((r) => ({
      id: String(r.id),
      epoch: Number(r.lease_epoch),
      runAt: r.run_at,
      delayMs: Number(r.delay_ms),
      traceparent: r.traceparent,
      claimToken,
      rated: r.rated === true,
    }));
  return { claimed, held: Number(last?.held ?? 0), flow: last?.flow === true };
}

/**
 * The safety net of the wake-ups (issue 16): makes parked tasks runnable
 * again where their key has free slots, at most that many per key, highest
 * priority first, then lowest vtime (migration 0034). A freed slot wakes one
 * parked task in its own statement (freeSlotsOf, and the enqueue's ON
 * CONFLICT); this covers a raised limit, the tasks an enqueue's wake spared,
 * a wake that skipped a locked row, and one that ran before the task it
 * should have woken was written. Waking too many is harmless: the claim
 * holds back what finds no slot. Reads the slot rows without locking them;
 * locks the woken tasks with SKIP LOCKED.
 *
 * wake_skips_parked_keys: the keys with parked tasks come from a skip scan
 * of tasks_parked_priority_idx, one index probe per key in (tenant, key)
 * order, and each key's slot row by its primary key. Asked of every slot row, the
 * planner hashed every parked task to find them: every sweep with work paid
 * 58-60 ms beside one saturated key with 50,000 parked (PostgreSQL 15).
 */
const tasksWakeParked = sql(
  'tasks_wake_parked',
  `with recursive parked_keys as (
     (select p.tenant, p.concurrency_key as key from tasks p
      where p.status = 'queued' and p.parked
      order by p.tenant, p.concurrency_key limit 1)
     union all
     select n.tenant, n.key from parked_keys k cross join lateral (
       select p.tenant, p.concurrency_key as key from tasks p
       where p.status = 'queued' and p.parked and (p.tenant, p.concurrency_key) > (k.tenant, k.key)
       order by p.tenant, p.concurrency_key limit 1) n
   ),
   -- In (tenant, key) order as the skip scan gives them; the limit stops it.
   room as (
     select s.tenant, s.key, s.max_running - h.running as free
     from parked_keys k join concurrency_slots s on s.tenant = k.tenant and s.key = k.key,
          lateral (select ${RUNNING_NOW} as running) h
     where h.running < s.max_running
     limit $1::int
   ),
   woken as (
     select w.id from room r cross join lateral (
       select p.id from tasks p
       where p.status = 'queued' and p.parked and p.tenant = r.tenant and p.concurrency_key = r.key
       order by p.priority desc, p.vtime, p.id
       limit r.free
       for update skip locked) w
   )
   -- By id (joined, a generic plan hashed a seq scan of tasks for a few rows).
   update tasks t set parked = false where t.id = any(array(select w.id from woken w))
   returning t.id`,
);

export async function wakeParkedTasks(q: Queryable, p: { keys: number }): Promise<number> {
  return (await q.query(tasksWakeParked, [p.keys])).length;
}


/**
 * Records that a claimed batch was handed to the Queue, so the reaper can tell
 * "claimed, never sent" (requeue, no attempt spent) from "sent, never
 * reported". One row per batch, keyed by the claim token its tasks carry; it
 * locks and writes no task row, so it cannot deadlock with a consumer's
 * fenced start over the same tasks, and it needs no fence: a task of the
 * batch that lost its claim meanwhile (cancelled, claim undone, re-claimed)
 * carries another token or is no longer running, so the mark never applies
 * to it. The batch's tasks are held from the mark's time for the dispatch
 * lease (the reaper reads it lazily); re-sent marks change nothing. The
 * batch's tasks are read (by id, unlocked) only to report those that lost
 * their claim meanwhile.
 *
 * Guard `mark_reads_its_ids`: the read names its rows by
 * `cur.id = any($3::bigint[])` beside the join, as the fenced writes do
 * (tasks-shared.ts). Joined only through the unnest, a plan made for the
 * values (a Worker's, every time) hashed `tasks` whole: a seq scan of the
 * 20,000 live tasks for each claim of 500 in the drain.
 */
const dispatchMarksInsert = sql(
  'dispatch_marks_insert',
  `with marked as (
     insert into dispatch_marks (claim_token, dispatched_at)
     select token, coalesce($1::timestamptz, now()) from unnest($2::uuid[]) as m(token)
     on conflict (claim_token) do nothing
   )
   select s.id, s.epoch, cur.lease_epoch as current_epoch, cur.status as current_status
   from unnest($3::bigint[], $4::bigint[]) as s(id, epoch)
        left join tasks cur on cur.id = s.id and cur.id = any($3::bigint[])
   -- lost: no longer held under this claim (a consumer that already started it is not lost)
   where cur.id is null or cur.lease_epoch <> s.epoch or cur.status <> 'running'`,
);

export async function markDispatched(
  q: Queryable,
  p: { now?: Now; claimTokens: readonly string[]; tasks: readonly { id: string; epoch: number }[] },
): Promise<LostFence[]> {
  const rows = await q.query<LostRow>(dispatchMarksInsert, [
    at(p.now),
    p.claimTokens,
    p.tasks.map((t) => t.id),
    p.tasks.map((t) => t.epoch),
  ]);
  return rows.map(lostFromRow);
}

/**
 * Gives back claims whose send failed: back to `queued` with their vtime and
 * the attempt refunded, as if never claimed. Safe even if some message did go
 * out: it carries the old epoch and finds the task not running (or re-claimed
 * under a higher epoch), so it never runs.
 */
const tasksReleaseUndispatched = sql(
  'tasks_release_if_undispatched',
  `with released as (
     update tasks t set status = 'queued', attempts = t.attempts - 1, lease_expires_at = null,
                        updated_at = coalesce($1::timestamptz, now())
     from (${batchRows([['id', '$2::bigint[]'], ['epoch', '$3::bigint[]']])}) as c
     where t.id = any($2::bigint[]) and t.id = c.id and t.lease_epoch = c.epoch and t.status = 'running'
       and t.dispatched_at is null and t.started_at is null
       and not exists (select 1 from dispatch_marks d where d.claim_token = t.claim_token)
     returning t.id, t.tenant, t.concurrency_key
   ),
   ${freeSlotsOf('released')}
   select r.id from released r cross join slots_freed`,
);

export async function releaseIfUndispatched(
  q: Queryable,
  p: { now?: Now; tasks: readonly { id: string; epoch: number }[] },
): Promise<number> {
  const rows = await q.query(tasksReleaseUndispatched, [at(p.now), p.tasks.map((t) => t.id), p.tasks.map((t) => t.epoch)]);
  return rows.length;
}
