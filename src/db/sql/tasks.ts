// The task statements. Each is one round trip, whatever the batch size: a batch
// travels as parallel arrays through unnest(). Every parameter is cast; a
// statement that reads the clock takes the override as $1 (null: the
// database's now()), so tests travel in time and the database clock is the
// only clock in production. The reads (get, list, spent keys) take the tenant as $1.
//
// Every write about an attempt is guarded by id + lease epoch + status: a
// stale worker, a redelivered message or a retried statement changes nothing.
//
// The fenced batch writes (release, start, finish) name their rows by
// `t.id = any($2::bigint[])` beside the join on the batch's (id, epoch) pairs:
// the planner then looks each id up. Joined only through the unnest, it
// answered them by reading tasks_running_idx whole (its `status = 'running'`
// predicate matches theirs): 10,100 rows and ~20 ms per 100 with 10,000
// tasks in flight (`BENCH_RUNNING=10000 npm run bench:explain`).
import type { TraceContext } from '../../tracing/trace-context.ts';
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import { RATE_LIMIT_START_WAIT_SECONDS } from '../../tasks/options.ts';
import {
  shownStatusSql,
  TASK_COLUMNS,
  TASK_COLUMNS_SHOWN,
  taskFromRow,
  type Delivery,
  type Task,
  type TaskCallback,
  type TaskRow,
  type TaskStatus,
} from '../../tasks/model.ts';

type Now = Date | null | undefined;
const at = (now: Now) => now ?? null;

const TASK_COLUMN_NAMES = TASK_COLUMNS.split(',').map((c) => c.trim());
const TASK_COLUMNS_T = TASK_COLUMN_NAMES.map((c) => `t.${c}`).join(', ');
// No batch write locks its rows in id order first any more (issue 12): the
// deadlock that lock prevented was the sweep's dispatch mark against a
// consumer's fenced start over the same tasks, and the mark no longer writes
// task rows (one dispatch_marks row per batch, migration 0015).

/**
 * Claimed by the look-ahead (or a due claim) but not started: for every user
 * action still a waiting task (DESIGN §5 "The look-ahead is invisible").
 * Over the row aliased `t`.
 */
export const CLAIMED_NOT_STARTED = `(t.status = 'running' and t.started_at is null)`;
/** Has not started: waiting, or claimed early and not started. Over `t`. */
export const NOT_STARTED = `(t.status in ('scheduled', 'queued') or ${CLAIMED_NOT_STARTED})`;

/** Fills the task columns of a UNION branch that reports a lost fence (by id only). */
const TASK_COLUMNS_NULLS_BUT_ID = TASK_COLUMN_NAMES.slice(1).map((c) => `null as ${c}`).join(', ');

// ---------------------------------------------------------------------------
// Enqueue

export interface NewTask {
  queue: string;
  task: string;
  payload: unknown;
  /** An absolute run time, or null to run `delayMs` after the database's now. */
  runAt: Date | null;
  delayMs: number | null;
  maxAttempts: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  timeoutMs: number;
  delivery: Delivery;
  idempotencyKey: string | null;
  /** Flow control (issue 16): at most `concurrencyLimit` running tasks of this tenant with this key. */
  concurrencyKey: string | null;
  concurrencyLimit: number | null;
  /** Rate limit (issue 16): at most `rateLimit` starts per `ratePeriodSeconds` of this tenant's tasks with this key. */
  rateKey: string | null;
  rateLimit: number | null;
  ratePeriodSeconds: number | null;
  /** -10..10: which of the tenant's tasks fills its fair share first. */
  priority: number;
  /** Completion callback (issue 15), or null. */
  callback: TaskCallback | null;
}

export interface WrittenTask extends Task {
  /** true: inserted now; false: an existing task with the same idempotency key. */
  created: boolean;
}

/**
 * Inserts a batch of one tenant's tasks. Tasks due within the look-ahead are
 * born `queued` with their fair-queuing vtime: per queue, the tenant's row is
 * advanced once for the whole batch (`max(last_vtime, queue clock) + n/weight`)
 * and the batch's tasks take the steps in input order. Only this tenant's row
 * is written, so tenants never serialize on each other; rows are locked in
 * (queue, tenant) order everywhere, so statements cannot deadlock on them.
 *
 * An existing idempotency key is resolved by ON CONFLICT on the row itself:
 * a task that has not started takes the new run time and payload; a spent one
 * (started or finished) is returned unchanged. "Not started" includes a task
 * the look-ahead claimed early and sent with a delay (DESIGN §5, issue 11):
 * its claim is undone (epoch bumped, so the message in flight is skipped as
 * stale; the attempt counted at the claim refunded) and it waits again. The
 * key is spent only once the fenced start has run. A key held by another
 * task type or queue refuses the whole statement (TQ003). Keys whose
 * task retention already deleted are left out here (the caller reads them from
 * spent_idempotency_keys); the trigger of migration 0002 closes the race with
 * a purge committing meanwhile.
 *
 * Quota (maxPendingTasks, guard `pending_quota`): the tenant's pending tasks
 * are counted in this same statement, index-only (tasks_pending_tenant_idx)
 * and only up to the limit, against the tasks the batch would create (a key
 * the tenant already holds only reschedules or deduplicates). Over the limit,
 * tasks_refuse_over_pending_quota raises TQ002 and the whole batch is
 * refused. It reads without locking: concurrent enqueues of one tenant do not
 * see each other's uncommitted rows, so together they may overshoot the limit
 * by at most what all but one of them add (README, Quotas).
 *
 * Concurrency keys (issue 16, guard `slot_limits`): the batch writes each
 * key's limit to its concurrency_slots row (the last item of the batch with
 * that key wins, and a later enqueue overrides an earlier one: the most
 * recent task's limit applies). It locks those slot rows, in (tenant, key)
 * order like every statement that takes them.
 */
/**
 * Registers the queues of CTE `input` (column `queue`). Only names not seen
 * yet: ON CONFLICT on an existing row waits for any transaction updating it
 * (a claim advancing vclock), which made every enqueue queue behind in-flight
 * claims; a plain read does not wait. Used by every statement that creates
 * tasks (enqueue, replay, trigger).
 */
export const KNOWN_QUEUES_OF_INPUT = `known_queues as (
     insert into queues (name)
     select distinct i.queue from input i
     where not exists (select 1 from queues q where q.name = i.queue)
     order by i.queue
     on conflict do nothing
   )`;

/**
 * Fair-queuing vtimes for the runnable rows of CTE `input` (columns queue,
 * runnable, ord) of the tenant $2: per queue, the tenant's row is advanced
 * once for the whole batch (`max(last_vtime, queue clock) + n/weight`) and the
 * rows take the steps in `ord` order. CTE `rows` is input's columns plus
 * vtime. Only this tenant's rows are written, in queue order, like every
 * statement that writes them.
 */
export const FAIR_VTIME_OF_INPUT = `runnable_counts as (
     select queue, count(*)::double precision as n from input where runnable group by queue
   ),
   fair as (
     insert into tenants as t (queue, tenant, last_vtime)
     select c.queue, $2::text, coalesce(q.vclock, 0) + c.n
     from runnable_counts c left join queues q on q.name = c.queue
     order by c.queue
     on conflict (queue, tenant) do update set
       last_vtime = greatest(t.last_vtime, coalesce((select q.vclock from queues q where q.name = t.queue), 0))
                    + (select c.n from runnable_counts c where c.queue = t.queue) / t.weight,
       updated_at = now()
     returning t.queue, t.last_vtime, t.weight
   ),
   rows as (
     select i.*,
            case when i.runnable then
              f.last_vtime - (c.n - row_number() over (partition by i.queue, i.runnable order by i.ord)) / f.weight
            end as vtime
     from input i
     left join fair f on i.runnable and f.queue = i.queue
     left join runnable_counts c on i.runnable and c.queue = i.queue
   )`;

/**
 * The maxPendingTasks step of every statement that creates tasks (enqueue,
 * replay, trigger): CTEs `quota` and `pending_quota` for the tenant $2.
 * `defaultMax` is the parameter holding the default from vars; `adding` an
 * expression counting the tasks the statement would create. The statement
 * must read `pending_quota.ok` before it inserts (a CTE nobody reads never
 * runs): over the limit, tasks_refuse_over_pending_quota raises TQ002 and the
 * whole statement is refused (429 quota_exceeded).
 */
export const pendingQuotaOf = (defaultMax: string, adding: string) => `quota as (
     select coalesce((select max_pending_tasks from tenant_quotas where tenant = $2::text), ${defaultMax}) as max_pending
   ),
   pending_quota as (
     select tasks_refuse_over_pending_quota(
              $2::text,
              (select count(*) from (
                 select 1 from tasks p
                 where p.tenant = $2::text and p.status in ('scheduled', 'queued', 'running')
                 limit (select max_pending from quota)) counted),
              ${adding},
              (select max_pending from quota)) as ok
   )`;

/** The insert shared by both enqueue statements, up to its conflict clause. */
const INSERT_BATCH = `with clock as (select coalesce($1::timestamptz, now()) as now),
   ${pendingQuotaOf(
     '$15::int',
     `(select count(*) from unnest($14::text[]) k(key)
               where k.key is null
                  or not exists (select 1 from tasks e where e.tenant = $2::text and e.idempotency_key = k.key))`,
   )},
   input as (
     select i.*, d.due_at, d.due_at <= clock.now + make_interval(secs => $3::int) as runnable
     from unnest($4::text[], $5::text[], $6::jsonb[], $7::timestamptz[], $8::bigint[], $9::int[], $10::int[],
                 $11::int[], $12::int[], $13::text[], $14::text[], $18::text[], $19::int[], $20::int[], $21::jsonb[],
                 $22::text[], $23::int[], $24::int[])
          with ordinality as i(queue, task, payload, run_at, delay_ms, max_attempts, backoff_base_ms,
                               backoff_max_ms, timeout_ms, delivery, idempotency_key, concurrency_key,
                               concurrency_limit, priority, callback, rate_key, rate_limit, rate_period_seconds, ord),
          clock, pending_quota,
          lateral (select coalesce(i.run_at, clock.now + coalesce(i.delay_ms, 0) * interval '1 millisecond') as due_at) d
     where pending_quota.ok and not exists (select 1 from spent_idempotency_keys s
                       where s.tenant = $2::text and s.idempotency_key = i.idempotency_key)
   ),
   ${KNOWN_QUEUES_OF_INPUT},
   slot_limits as (
     insert into concurrency_slots as s (tenant, key, max_running)
     select distinct on (i.concurrency_key) $2::text, i.concurrency_key, i.concurrency_limit
     from input i where i.concurrency_key is not null
     order by i.concurrency_key, i.ord desc
     on conflict (tenant, key) do update set max_running = excluded.max_running, updated_at = now()
   ),
   ${FAIR_VTIME_OF_INPUT}
   insert into tasks as t (tenant, queue, task, payload, status, run_at, max_attempts, backoff_base_ms,
                           backoff_max_ms, timeout_ms, delivery, idempotency_key, vtime, created_at, updated_at,
                           traceparent, tracestate, concurrency_key, concurrency_limit, priority, callback,
                           rate_key, rate_limit, rate_period_seconds)
   select $2::text, r.queue, r.task, r.payload, case when r.runnable then 'queued' else 'scheduled' end,
          r.due_at, r.max_attempts, r.backoff_base_ms, r.backoff_max_ms, r.timeout_ms, r.delivery,
          r.idempotency_key, r.vtime, clock.now, clock.now, $16::text, $17::text,
          r.concurrency_key, r.concurrency_limit, r.priority, r.callback, r.rate_key, r.rate_limit, r.rate_period_seconds
   from rows r, clock
   order by r.ord
`;

const tasksInsertBatch = sql(
  'tasks_insert_batch',
  `${INSERT_BATCH}   on conflict (tenant, idempotency_key) where idempotency_key is not null do update set
     -- Guard: the key's task type and queue never change (TQ003, 409, the whole batch refused).
     task       = tasks_keep_task_type_of_key(t.idempotency_key, t.task, t.queue, excluded.task, excluded.queue),
     payload    = case when ${NOT_STARTED} then excluded.payload else t.payload end,
     run_at     = case when ${NOT_STARTED} then excluded.run_at else t.run_at end,
     vtime      = case when not ${NOT_STARTED} then t.vtime
                       when excluded.status = 'queued' then coalesce(t.vtime, excluded.vtime) end,
     status     = case when ${NOT_STARTED} then excluded.status else t.status end,
     -- A waiting task takes the new flow control and is runnable again (an
     -- early claim undone frees its old key's slot through the trigger).
     concurrency_key   = case when ${NOT_STARTED} then excluded.concurrency_key else t.concurrency_key end,
     concurrency_limit = case when ${NOT_STARTED} then excluded.concurrency_limit else t.concurrency_limit end,
     priority   = case when ${NOT_STARTED} then excluded.priority else t.priority end,
     rate_key   = case when ${NOT_STARTED} then excluded.rate_key else t.rate_key end,
     rate_limit = case when ${NOT_STARTED} then excluded.rate_limit else t.rate_limit end,
     rate_period_seconds = case when ${NOT_STARTED} then excluded.rate_period_seconds else t.rate_period_seconds end,
     parked     = case when ${NOT_STARTED} then false else t.parked end,
     -- reschedule_if_claimed_not_started: undo the early claim.
     lease_epoch      = case when ${CLAIMED_NOT_STARTED} then t.lease_epoch + 1 else t.lease_epoch end,
     attempts         = case when ${CLAIMED_NOT_STARTED} then t.attempts - 1 else t.attempts end,
     lease_expires_at = case when ${CLAIMED_NOT_STARTED} then null else t.lease_expires_at end,
     dispatched_at    = case when ${CLAIMED_NOT_STARTED} then null else t.dispatched_at end,
     updated_at = case when ${NOT_STARTED} then excluded.updated_at else t.updated_at end
   -- A created row's payload is the caller's own: sending 1,000 of them back
   -- cost about a third of the statement, so only existing rows return it.
   returning ${TASK_COLUMNS_T.replace('t.payload', 'case when t.xmax = 0 then null else t.payload end as payload')},
             (t.xmax = 0) as created`,
);

/**
 * The same insert when no item carries an idempotency key: no ON CONFLICT
 * (no speculative insertion), and it returns only what the input does not
 * say (id, status, run time, creation time); insertTasks builds the answers
 * from the input. Same locks and guards as tasks_insert_batch (the quota).
 */
const tasksInsertBatchPlain = sql(
  'tasks_insert_batch_plain',
  `${INSERT_BATCH}   returning t.id, t.status, t.run_at, t.created_at`,
);

/** One result per input, in input order; null where the key was spent and its task already purged. */
export async function insertTasks(
  q: Queryable,
  p: {
    now?: Now;
    tenant: string;
    lookaheadSeconds: number;
    tasks: readonly NewTask[];
    maxPendingTasks: number;
    trace?: TraceContext | null;
  },
): Promise<(WrittenTask | null)[]> {
  const col = <K extends keyof NewTask>(k: K) => p.tasks.map((t) => t[k]);
  const plain = p.tasks.every((t) => t.idempotencyKey === null);
  const rows = await q.query<TaskRow & { created: boolean }>(plain ? tasksInsertBatchPlain : tasksInsertBatch, [
    at(p.now),
    p.tenant,
    p.lookaheadSeconds,
    col('queue'),
    col('task'),
    p.tasks.map((t) => JSON.stringify(t.payload ?? null)),
    col('runAt'),
    col('delayMs'),
    col('maxAttempts'),
    col('backoffBaseMs'),
    col('backoffMaxMs'),
    col('timeoutMs'),
    col('delivery'),
    col('idempotencyKey'),
    p.maxPendingTasks,
    p.trace?.traceparent ?? null,
    p.trace?.tracestate ?? null,
    col('concurrencyKey'),
    col('concurrencyLimit'),
    col('priority'),
    p.tasks.map((t) => (t.callback ? JSON.stringify(t.callback) : null)),
    col('rateKey'),
    col('rateLimit'),
    col('ratePeriodSeconds'),
  ]);
  if (plain) {
    // Inserted in input order, so the ids ascend in that order.
    const sorted = rows.sort((a, b) => Number(BigInt(a.id) - BigInt(b.id)));
    if (sorted.length !== p.tasks.length) throw new Error(`enqueue: ${sorted.length} rows inserted for ${p.tasks.length} tasks`);
    return p.tasks.map((input, i) => {
      const r = sorted[i]!;
      return {
        ...taskFromRow({
          id: r.id,
          tenant: p.tenant,
          queue: input.queue,
          task: input.task,
          payload: input.payload,
          status: r.status,
          run_at: r.run_at,
          created_at: r.created_at,
          updated_at: r.created_at,
          dispatched_at: null,
          started_at: null,
          finished_at: null,
          attempts: 0,
          max_attempts: input.maxAttempts,
          last_error: null,
          backoff_base_ms: input.backoffBaseMs,
          backoff_max_ms: input.backoffMaxMs,
          timeout_ms: input.timeoutMs,
          delivery: input.delivery,
          lease_epoch: '0',
          idempotency_key: null,
          schedule_id: null,
          scheduled_for: null,
          replay_of: null,
          concurrency_key: input.concurrencyKey,
          concurrency_limit: input.concurrencyLimit,
          priority: input.priority,
          callback: input.callback,
          rate_key: input.rateKey,
          rate_limit: input.rateLimit,
          rate_period_seconds: input.ratePeriodSeconds,
        }),
        created: true,
      };
    });
  }
  // Back to input order: keyed rows by key; unkeyed ones were inserted in
  // input order, so their ids ascend in that order.
  const byKey = new Map(rows.filter((r) => r.idempotency_key !== null).map((r) => [r.idempotency_key!, r]));
  const unkeyed = rows.filter((r) => r.idempotency_key === null).sort((a, b) => Number(BigInt(a.id) - BigInt(b.id)));
  let next = 0;
  return p.tasks.map((input) => {
    const r = input.idempotencyKey === null ? unkeyed[next++] : byKey.get(input.idempotencyKey);
    if (!r) return null;
    return { ...taskFromRow(r.created ? { ...r, payload: input.payload } : r), created: r.created };
  });
}

export interface SpentKey {
  idempotencyKey: string;
  taskId: string;
  status: TaskStatus;
  spentAt: Date;
}

const spentKeysFind = sql(
  'spent_idempotency_keys_find',
  `select idempotency_key, task_id, status, spent_at from spent_idempotency_keys
   where tenant = $1::text and idempotency_key = any($2::text[])`,
);

export async function findSpentKeys(q: Queryable, tenant: string, keys: readonly string[]): Promise<SpentKey[]> {
  const rows = await q.query<{ idempotency_key: string; task_id: string; status: TaskStatus; spent_at: Date }>(
    spentKeysFind,
    [tenant, keys],
  );
  return rows.map((r) => ({ idempotencyKey: r.idempotency_key, taskId: String(r.task_id), status: r.status, spentAt: r.spent_at }));
}

// ---------------------------------------------------------------------------
// Sweep: promote, claim, mark dispatched

/**
 * Makes due `scheduled` tasks runnable: locks a bounded batch (SKIP LOCKED, so
 * concurrent sweeps split the work), advances each (queue, tenant) row once
 * for its share of the batch, and gives every task its vtime in run_at order.
 */
const tasksPromoteDue = sql(
  'tasks_promote_due',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   due as (
     select t.id, t.queue, t.tenant, t.run_at from tasks t, clock
     where t.status = 'scheduled' and t.run_at <= clock.now + make_interval(secs => $2::int)
     order by t.run_at, t.id
     limit $3::int
     for update of t skip locked
   ),
   counts as (select queue, tenant, count(*)::double precision as n from due group by queue, tenant),
   fair as (
     insert into tenants as t (queue, tenant, last_vtime)
     select c.queue, c.tenant, coalesce(q.vclock, 0) + c.n
     from counts c left join queues q on q.name = c.queue
     order by c.queue, c.tenant
     on conflict (queue, tenant) do update set
       last_vtime = greatest(t.last_vtime, coalesce((select q.vclock from queues q where q.name = t.queue), 0))
                    + (select c.n from counts c where c.queue = t.queue and c.tenant = t.tenant) / t.weight,
       updated_at = now()
     returning t.queue, t.tenant, t.last_vtime, t.weight
   ),
   ranked as (
     select d.id,
            f.last_vtime - (c.n - row_number() over (partition by d.queue, d.tenant order by d.run_at, d.id)) / f.weight
              as vtime
     from due d join fair f using (queue, tenant) join counts c using (queue, tenant)
   )
   update tasks t set status = 'queued', vtime = r.vtime, parked = false, updated_at = clock.now
   from ranked r, clock
   where t.id = r.id
   returning t.id`,
);

export async function promoteDueTasks(
  q: Queryable,
  p: { now?: Now; lookaheadSeconds: number; limit: number },
): Promise<number> {
  const rows = await q.query(tasksPromoteDue, [at(p.now), p.lookaheadSeconds, p.limit]);
  return rows.length;
}

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
}

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
 * rest are `parked` (out of the runnable index: later claims never re-read
 * them, and the batch's other keys and tenants are claimed in the same
 * statement). A freed slot wakes a parked task (migration 0016's trigger).
 *
 * Rate limits (issue 16, `rate_lines`, migration 0018): each rate-limited
 * task of the batch is reserved a start on its key's claim line (GCRA
 * without bursts: a step of period / limit after the previous reservation,
 * never before its due time) and sent for it (run_at moves there). A
 * reservation beyond the look-ahead ($7) is not taken: the task goes back to
 * `scheduled` at that time (no attempt spent) and counts with the parked in
 * the returned count, so the sweep keeps claiming past it. Rate is decided
 * before concurrency: a reserved task the key's slots then park leaves a gap
 * in the line (fewer starts, never more).
 */
const tasksClaimRunnable = sql(
  'tasks_claim_runnable',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   slots as (
     select t.id, t.tenant, t.vtime from tasks t
     where t.status = 'queued' and not t.parked and t.queue = $2::text
       and not exists (select 1 from queues q where q.name = $2::text and q.paused)
     order by t.vtime, t.id
     limit $3::int
     for update of t skip locked
   ),
   shares as (select tenant, count(*)::int as k from slots group by tenant),
   best_locked as (
     select b.* from shares s cross join lateral (
       select t.id, t.tenant, t.priority, t.run_at, t.vtime, t.concurrency_key, t.concurrency_limit,
              t.rate_key, t.rate_limit, t.rate_period_seconds from tasks t
       where t.status = 'queued' and not t.parked and t.queue = $2::text and t.tenant = s.tenant
       order by t.priority desc, t.run_at, t.id
       limit s.k
       for update of t skip locked) b
     -- At most the batch (the shares sum to it): no change, but the planner
     -- then estimates the batch, not 600 rows per tenant, and keeps the
     -- statement's cost under jit_above_cost (JIT compiled it in 4 s).
     limit $3::int
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
     where t.id = d.id
   ),
   rate_ranked as (
     select p.id, p.tenant, p.rate_key, greatest(p.run_at, clock.now) as due,
            first_value(p.rate_limit) over newest as max_starts,
            first_value(p.rate_period_seconds) over newest as period_seconds,
            row_number() over (partition by p.tenant, p.rate_key order by p.run_at, p.vtime, p.id) as pos
     from picked p, clock
     where p.rate_key is not null
     window newest as (partition by p.tenant, p.rate_key order by p.id desc)
   ),
   rate_base as (
     select r.*, rate_limit_step(r.max_starts, r.period_seconds) as step,
            max(r.due - (r.pos - 1) * rate_limit_step(r.max_starts, r.period_seconds))
              over (partition by r.tenant, r.rate_key order by r.pos) as base
     from rate_ranked r
   ),
   rate_groups as (
     select b.tenant, b.rate_key, b.max_starts, b.period_seconds, b.step, array_agg(b.base order by b.pos) as bases
     from rate_base b
     group by b.tenant, b.rate_key, b.max_starts, b.period_seconds, b.step
   ),
   -- reserve_within_lookahead: only starts the look-ahead may send move the
   -- line (rate_limit_line_after, migration 0018).
   rate_lines as (
     insert into rate_limits as l (tenant, key, max_starts, period_seconds, next_claim_at)
     select g.tenant, g.rate_key, g.max_starts, g.period_seconds,
            rate_limit_line_after('-infinity', g.bases, g.step, clock.now + make_interval(secs => $7::int))
     from rate_groups g, clock
     order by g.tenant, g.rate_key
     on conflict (tenant, key) do update set
       max_starts = excluded.max_starts,
       period_seconds = excluded.period_seconds,
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
   parked as (
     update tasks t set parked = true, vtime = d.vtime, updated_at = clock.now
     from decided d, clock
     where t.id = d.id and not d.takes_slot and not d.deferred
   ),
   -- Over its key's rate beyond the look-ahead: back to scheduled at the time
   -- the line allows (no attempt spent); the promote brings it back.
   deferred as (
     update tasks t set status = 'scheduled', run_at = d.start_at, vtime = null, updated_at = clock.now
     from decided d, clock
     where t.id = d.id and d.deferred
   ),
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
     where t.id = d.id and d.takes_slot
     returning t.id, t.lease_epoch, t.run_at, t.vtime, t.traceparent,
               greatest(0, floor(extract(epoch from t.run_at - clock.now) * 1000))::bigint as delay_ms
   ),
   advanced as (
     update queues q set vclock = greatest(q.vclock, m.v)
     from (select max(vtime) as v from claimed) m
     where q.name = $2::text and m.v is not null
   )
   (select id, lease_epoch, run_at, delay_ms, traceparent, null::int as parked from claimed order by vtime, id)
   union all
   -- How many were parked: the sweep keeps claiming while claimed + parked fill batches.
   select null, null, null, null, null, (select count(*)::int from decided where not takes_slot)`,
);

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
  },
): Promise<{ claimed: ClaimedTask[]; parked: number }> {
  const claimToken = p.claimToken ?? crypto.randomUUID();
  const rows = await q.query<{
    id: string | null;
    lease_epoch: string;
    run_at: Date;
    delay_ms: string;
    traceparent: string | null;
    parked: number | null;
  }>(
    tasksClaimRunnable,
    [at(p.now), p.queue, p.limit, p.claimedBy, p.leaseSeconds, claimToken, p.lookaheadSeconds ?? 60],
  );
  const claimed = rows
    .filter((r) => r.id !== null)
    .map((r) => ({
      id: String(r.id),
      epoch: Number(r.lease_epoch),
      runAt: r.run_at,
      delayMs: Number(r.delay_ms),
      traceparent: r.traceparent,
      claimToken,
    }));
  return { claimed, parked: Number(rows.find((r) => r.id === null)?.parked ?? 0) };
}

/**
 * The safety net of the wake-ups (issue 16): makes parked tasks runnable
 * again where their key has free slots, at most that many per key, lowest
 * vtime first. A freed slot wakes one parked task in its own statement
 * (migration 0016's trigger); this covers a raised limit and a wake that
 * skipped a locked row. Waking too many is harmless: the claim parks what
 * finds no slot. Reads the slot rows without locking them; locks the woken
 * tasks with SKIP LOCKED.
 */
const tasksWakeParked = sql(
  'tasks_wake_parked',
  `with room as (
     select s.tenant, s.key, s.max_running - h.running as free
     from concurrency_slots s,
          lateral (select greatest(0, s.running - coalesce((select sum(f.n)::int from concurrency_frees f
                                                            where f.tenant = s.tenant and f.key = s.key), 0)) as running) h
     where h.running < s.max_running
       and exists (select 1 from tasks p where p.status = 'queued' and p.parked
                   and p.tenant = s.tenant and p.concurrency_key = s.key)
     order by s.tenant, s.key
     limit $1::int
   ),
   woken as (
     select w.id from room r cross join lateral (
       select p.id from tasks p
       where p.status = 'queued' and p.parked and p.tenant = r.tenant and p.concurrency_key = r.key
       order by p.vtime, p.id
       limit r.free
       for update skip locked) w
   )
   update tasks t set parked = false from woken w where t.id = w.id
   returning t.id`,
);

export async function wakeParkedTasks(q: Queryable, p: { keys: number }): Promise<number> {
  return (await q.query(tasksWakeParked, [p.keys])).length;
}

/** A fenced write that found the task no longer held at the expected epoch. */
export interface LostFence {
  id: string;
  epoch: number;
  /** null: the task no longer exists. */
  currentEpoch: number | null;
  currentStatus: TaskStatus | null;
  /** Set when the write was refused rather than lost: the start of a task whose queue is paused. */
  reason?: 'queue_paused' | 'rate_limited';
}

interface LostRow {
  id: string;
  epoch: string;
  current_epoch: string | null;
  current_status: TaskStatus | null;
}
const lostFromRow = (r: LostRow): LostFence => ({
  id: String(r.id),
  epoch: Number(r.epoch),
  currentEpoch: r.current_epoch === null ? null : Number(r.current_epoch),
  currentStatus: r.current_status,
});

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
 */
const dispatchMarksInsert = sql(
  'dispatch_marks_insert',
  `with marked as (
     insert into dispatch_marks (claim_token, dispatched_at)
     select token, coalesce($1::timestamptz, now()) from unnest($2::uuid[]) as m(token)
     on conflict (claim_token) do nothing
   )
   select s.id, s.epoch, cur.lease_epoch as current_epoch, cur.status as current_status
   from unnest($3::bigint[], $4::bigint[]) as s(id, epoch) left join tasks cur on cur.id = s.id
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
  `update tasks t set status = 'queued', attempts = t.attempts - 1, lease_expires_at = null,
                      updated_at = coalesce($1::timestamptz, now())
   from unnest($2::bigint[], $3::bigint[]) as c(id, epoch)
   where t.id = any($2::bigint[]) and t.id = c.id and t.lease_epoch = c.epoch and t.status = 'running'
     and t.dispatched_at is null and t.started_at is null
     and not exists (select 1 from dispatch_marks d where d.claim_token = t.claim_token)
   returning t.id`,
);

export async function releaseClaims(
  q: Queryable,
  p: { now?: Now; tasks: readonly { id: string; epoch: number }[] },
): Promise<number> {
  const rows = await q.query(tasksReleaseUndispatched, [at(p.now), p.tasks.map((t) => t.id), p.tasks.map((t) => t.epoch)]);
  return rows.length;
}

// ---------------------------------------------------------------------------
// Consume: fenced start, fenced finish, heartbeat

export interface StartedTask {
  task: Task;
  /** The W3C trace context of the request that enqueued it, if it had one. */
  trace: TraceContext | null;
  /** Milliseconds until its start: above 0 only for a rate-limited task given a later place on its key's line. */
  waitMs: number;
}

/** A matching message that arrived before its task's run_at: not started, to be started after `waitMs`. */
export interface EarlyTask {
  id: string;
  epoch: number;
  /** Milliseconds until run_at on the database clock. */
  waitMs: number;
}

/**
 * Fenced start for a whole message batch: marks `started_at` only where id,
 * epoch and `running` still match and the attempt has not started yet, so a
 * duplicate delivery, a cancelled task or a stale epoch never runs. The lease
 * is stretched to the task's timeout plus grace from its start.
 *
 * start_only_when_due: a task starts only once its run_at has come on the
 * database clock. A message delivered early (the Queue's whole-second delay
 * rounded down, plus its batch timeout) leaves its task claimed but not
 * started, so until then every user action (reschedule by key, cancel, queue
 * or schedule pause) still takes it back; it comes back as `early` with the
 * wait, and the consumer starts it with this same statement once due.
 *
 * refuse_if_queue_paused: a task whose queue was paused after it was claimed
 * (sent with a delay by the look-ahead) does not start. It goes back to
 * `queued` with its vtime (so it keeps its place) and the attempt counted at
 * the claim refunded, and comes back as lost with reason `queue_paused`. Both
 * branches read the queue's flag in the statement's one snapshot, so each
 * task takes exactly one of them.
 *
 * Rate limits (issue 16, refuse_over_rate): a rate-limited task starts on its
 * key's start line once due, at greatest(now, line): a place up to $5 seconds
 * later than now is taken at once (started_at set there; the consumer waits
 * for it, so in that wait the task shows running: the one exception to
 * start_only_when_due). The line moves a step past each place; the starts it
 * records are therefore a step apart. One the line would push past
 * its due time and more than $5 seconds from now goes back to `queued` (vtime kept,
 * attempt refunded, run_at moved to when allowed) and comes back as lost
 * with reason `rate_limited`.
 */
const tasksStartIfClaimed = sql(
  'tasks_start_if_claimed',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   msg as (select * from unnest($2::bigint[], $3::bigint[]) as m(id, epoch)),
   -- The batch's rate-limited tasks, locked before their keys' rows: every
   -- statement takes task rows first, then rate_limits rows (a claim holding
   -- a key's row never waits for a task row; unlocked here, a start holding
   -- the key's row deadlocked against a claim, seen in the bench).
   rate_locked as (
     select t.id, t.tenant, t.rate_key, t.run_at, t.rate_limit, t.rate_period_seconds
     from msg join tasks t on t.id = msg.id cross join clock
     where t.id = any($2::bigint[]) and t.lease_epoch = msg.epoch and t.status = 'running' and t.started_at is null
       and t.rate_key is not null
       -- start_only_when_due: an early message takes no place on the line yet.
       and t.run_at <= clock.now
       and not exists (select 1 from queues q where q.name = t.queue and q.paused)
     order by t.id
     for no key update of t
   ),
   -- start_rate_of_key: the spacing is the key's, as its last claim set it
   -- (from the most recently enqueued task it claimed), not that of the few
   -- tasks this statement starts: early messages start in groups, each with
   -- its own statement. The batch's newest only if the key has no row yet.
   rate_due as (
     select r.id, r.tenant, r.rate_key, greatest(clock.now, r.run_at) as due,
            coalesce(k.max_starts, first_value(r.rate_limit) over newest) as max_starts,
            coalesce(k.period_seconds, first_value(r.rate_period_seconds) over newest) as period_seconds,
            row_number() over (partition by r.tenant, r.rate_key order by greatest(clock.now, r.run_at), r.id) as pos
     from rate_locked r cross join clock
          left join rate_limits k on k.tenant = r.tenant and k.key = r.rate_key
     window newest as (partition by r.tenant, r.rate_key order by r.id desc)
   ),
   rate_base as (
     select r.*, rate_limit_step(r.max_starts, r.period_seconds) as step,
            max(r.due - (r.pos - 1) * rate_limit_step(r.max_starts, r.period_seconds))
              over (partition by r.tenant, r.rate_key order by r.pos) as base
     from rate_due r
   ),
   rate_starts as (
     insert into rate_limits as l (tenant, key, max_starts, period_seconds, next_start_at)
     select distinct on (b.tenant, b.rate_key) b.tenant, b.rate_key, b.max_starts, b.period_seconds,
            coalesce((select max(x.base + x.pos * x.step) from rate_base x
                      where x.tenant = b.tenant and x.rate_key = b.rate_key
                        and x.base + (x.pos - 1) * x.step <= greatest(x.due, clock.now + make_interval(secs => $5::int))),
                     '-infinity')
     from rate_base b, clock
     order by b.tenant, b.rate_key
     on conflict (tenant, key) do update set
       start_from = l.next_start_at,
       -- start_line_advance: the line moves past every start it lets through.
       next_start_at = coalesce((select max(greatest(l.next_start_at, x.base) + x.pos * x.step) from rate_base x
                                 where x.tenant = l.tenant and x.rate_key = l.key
                                   and greatest(l.next_start_at, x.base) + (x.pos - 1) * x.step
                                       <= greatest(x.due, (select now from clock) + make_interval(secs => $5::int))),
                                l.next_start_at),
       updated_at = now()
     returning l.tenant, l.key, l.start_from
   ),
   rate_decided as (
     select b.id, s.start_at, s.start_at > greatest(b.due, clock.now + make_interval(secs => $5::int)) as over
     from rate_base b join rate_starts g on g.tenant = b.tenant and g.key = b.rate_key, clock,
          lateral (select greatest(g.start_from, b.base) + (b.pos - 1) * b.step as start_at) s
   ),
   refused as (
     update tasks t set
       status = 'queued',
       attempts = t.attempts - 1,
       dispatched_at = null,
       lease_expires_at = null,
       updated_at = clock.now
     from msg, clock
     where t.id = any($2::bigint[]) and t.id = msg.id and t.lease_epoch = msg.epoch
       and t.status = 'running' and t.started_at is null
       and exists (select 1 from queues q where q.name = t.queue and q.paused)
     returning t.id
   ),
   -- refuse_over_rate: a start the line would push past the wait budget goes
   -- back queued with its vtime, the attempt refunded, run_at moved to when
   -- the line allows (the rows rate_due found startable, rechecked).
   rate_refused as (
     update tasks t set
       status = 'queued',
       attempts = t.attempts - 1,
       run_at = rd.start_at,
       dispatched_at = null,
       lease_expires_at = null,
       updated_at = clock.now
     from rate_decided rd join msg on msg.id = rd.id, clock
     where t.id = any($2::bigint[]) and t.id = rd.id and t.lease_epoch = msg.epoch
       and t.status = 'running' and t.started_at is null and rd.over
     returning t.id
   ),
   started as (
     update tasks t set
       -- A rate-limited start takes its place on the key's line: up to $5 s
       -- later than now (the consumer waits for it); any other starts now.
       run_at = coalesce(msg.start_at, t.run_at),
       started_at = greatest(clock.now, coalesce(msg.start_at, clock.now)),
       -- The hand-off's time, from the batch's dispatch mark (now if the sweep died before writing it).
       dispatched_at = coalesce(t.dispatched_at,
                                (select d.dispatched_at from dispatch_marks d where d.claim_token = t.claim_token),
                                clock.now),
       lease_expires_at = greatest(clock.now, coalesce(msg.start_at, clock.now))
                          + make_interval(secs => (t.timeout_ms / 1000.0) + $4::int),
       updated_at = clock.now
     -- refuse_over_rate: not the starts the rate line pushed too far (rate_refused took them).
     from (select m.*, rd.start_at from msg m left join rate_decided rd on rd.id = m.id
           where not coalesce(rd.over, false)) msg, clock
     where t.id = any($2::bigint[]) and t.id = msg.id and t.lease_epoch = msg.epoch
       and t.status = 'running' and t.started_at is null
       and not exists (select 1 from queues q where q.name = t.queue and q.paused)
       and t.run_at <= clock.now
     returning ${TASK_COLUMNS_T}, t.traceparent, t.tracestate,
               greatest(0, extract(epoch from t.started_at - clock.now) * 1000)::float8 as wait_ms
   ),
   -- Attempt history (migration 0017): a message that started nothing is
   -- recorded against its epoch, \`cancelled\` when the task was cancelled
   -- after its early claim, \`skipped_stale\` otherwise (a stale or duplicate
   -- message).
   skipped as (
     insert into task_attempts (task_id, attempt, epoch, outcome, finished_at, error_name, error_message)
     select m.id, cur.attempts, m.epoch, case when cur.status = 'cancelled' then 'cancelled' else 'skipped_stale' end,
            clock.now, 'StaleMessage',
            'message of epoch ' || m.epoch || ' skipped: the task is ' || cur.status || ' at epoch ' || cur.lease_epoch
     from msg m join tasks cur on cur.id = m.id, clock
     -- Not a message of the current claim that did not start: early (it
     -- waits and comes back) or refused for a paused queue (refunded).
     where m.id not in (select id from started)
       and not (cur.lease_epoch = m.epoch and cur.status = 'running' and cur.started_at is null)
   )
   select s.*, null::bigint as epoch, null::bigint as current_epoch, null::text as current_status,
          true as started, null::text as reason
   from started s
   union all
   select m.id, ${TASK_COLUMNS_NULLS_BUT_ID}, null, null,
          case when r.id is null and rr.id is null
               then greatest(0, extract(epoch from cur.run_at - clock.now) * 1000)::float8 end,
          m.epoch, cur.lease_epoch, case when r.id is not null or rr.id is not null then 'queued' else cur.status end, false,
          case when r.id is not null then 'queue_paused'
               when rr.id is not null then 'rate_limited'
               when cur.lease_epoch = m.epoch and cur.status = 'running' and cur.started_at is null and cur.run_at > clock.now
               then 'early' end
   from msg m cross join clock left join tasks cur on cur.id = m.id left join refused r on r.id = m.id
        left join rate_refused rr on rr.id = m.id
   where m.id not in (select id from started)`,
);

export async function startTasks(
  q: Queryable,
  p: { now?: Now; tasks: readonly { id: string; epoch: number }[]; leaseGraceSeconds: number },
): Promise<{ started: StartedTask[]; early: EarlyTask[]; lost: LostFence[] }> {
  const rows = await q.query<
    TaskRow & LostRow & {
      wait_ms: number | null;
      started: boolean;
      reason: 'queue_paused' | 'rate_limited' | 'early' | null;
      traceparent: string | null;
      tracestate: string | null;
    }
  >(tasksStartIfClaimed, [
    at(p.now),
    p.tasks.map((t) => t.id),
    p.tasks.map((t) => t.epoch),
    p.leaseGraceSeconds,
    RATE_LIMIT_START_WAIT_SECONDS,
  ]);
  const started: StartedTask[] = [];
  const early: EarlyTask[] = [];
  const lost: LostFence[] = [];
  for (const r of rows) {
    if (r.started) {
      const trace = r.traceparent ? { traceparent: r.traceparent, tracestate: r.tracestate } : null;
      started.push({ task: taskFromRow(r), trace, waitMs: Number(r.wait_ms ?? 0) });
    } else if (r.reason === 'early') early.push({ id: String(r.id), epoch: Number(r.epoch), waitMs: Number(r.wait_ms) });
    else lost.push(r.reason ? { ...lostFromRow(r), reason: r.reason } : lostFromRow(r));
  }
  return { started, early, lost };
}

export type AttemptOutcome = 'succeeded' | 'failed' | 'permanent';

export interface AttemptResult {
  id: string;
  epoch: number;
  outcome: AttemptOutcome;
  error: string | null;
  /** Overrides the backoff (e.g. a Retry-After); null: the task's backoff. */
  retryDelayMs: number | null;
  /** For the attempt history: the error's name and message (at most 2 KiB together). */
  errorName?: string | null;
  errorMessage?: string | null;
  /** The attempt ran out of its timeout (outcome `timed_out` in the history). */
  timedOut?: boolean;
  /** For http tasks: the response status, when a response came. */
  httpStatus?: number | null;
  /** The handler's return value as JSON text (at most 64 KiB), stored on success; null: none. */
  result?: string | null;
}

export interface FinishedTask {
  id: string;
  status: TaskStatus;
  runAt: Date;
}

/**
 * Fenced finish for a whole batch: writes each result only where the epoch
 * still matches and the task is still `running`. A failure retries (back to
 * `scheduled`, run_at pushed out by the backoff) while attempts remain and the
 * task is at-least-once; otherwise it is `dead`. Results that lost the fence
 * come back, never applied.
 */
const tasksFinishIfRunning = sql(
  'tasks_finish_if_running',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   res as (
     select * from unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::text[], $8::text[],
                          $9::boolean[], $10::int[], $11::jsonb[])
       as r(id, epoch, outcome, error, retry_delay_ms, error_name, error_message, timed_out, http_status, result)
   ),
   decided as (
     select r.*, t.attempts, t.started_at as attempt_started_at, case
              when r.outcome = 'succeeded' then 'succeeded'
              when r.outcome = 'failed' and t.delivery = 'at_least_once' and t.attempts < t.max_attempts then 'scheduled'
              else 'dead'
            end as next_status
     from res r join tasks t on t.id = r.id
     where t.id = any($2::bigint[])
   ),
   finished as (
     update tasks t set
       status = d.next_status,
       finished_at = case when d.next_status = 'scheduled' then null else clock.now end,
       run_at = case when d.next_status = 'scheduled'
                     then clock.now + coalesce(d.retry_delay_ms, task_backoff_ms(t.backoff_base_ms, t.backoff_max_ms, t.attempts))
                                      * interval '1 millisecond'
                     else t.run_at end,
       vtime = case when d.next_status = 'scheduled' then null else t.vtime end,
       dispatched_at = case when d.next_status = 'scheduled' then null else t.dispatched_at end,
       started_at = case when d.next_status = 'scheduled' then null else t.started_at end,
       lease_expires_at = null,
       last_error = coalesce(d.error, t.last_error),
       result = case when d.next_status = 'succeeded' then d.result else t.result end,
       updated_at = clock.now
     from decided d, clock
     where t.id = any($2::bigint[]) and t.id = d.id and t.lease_epoch = d.epoch and t.status = 'running'
     returning t.id, t.status, t.run_at, d.attempts, d.epoch, d.outcome, d.timed_out, d.attempt_started_at,
               d.error_name, d.error_message, d.http_status, clock.now
   ),
   -- Attempt history (migration 0017): one row per finish applied (the
   -- update's own rows, no join), none for a result that lost its fence.
   attempts_written as (
     insert into task_attempts (task_id, attempt, epoch, outcome, started_at, finished_at, error_name, error_message, http_status)
     select f.id, f.attempts, f.epoch,
            case when f.outcome = 'succeeded' then 'succeeded' when f.timed_out then 'timed_out' else 'failed' end,
            f.attempt_started_at, f.now, f.error_name, f.error_message, f.http_status
     from finished f
   )
   select f.id, null::bigint as epoch, f.status, f.run_at, null::bigint as current_epoch, null::text as current_status
   from finished f
   union all
   select r.id, r.epoch, null, null, cur.lease_epoch, cur.status
   from res r left join tasks cur on cur.id = r.id
   where r.id not in (select id from finished)`,
);

export async function finishTasks(
  q: Queryable,
  p: { now?: Now; results: readonly AttemptResult[] },
): Promise<{ finished: FinishedTask[]; lost: LostFence[] }> {
  const rows = await q.query<LostRow & { status: TaskStatus | null; run_at: Date | null }>(tasksFinishIfRunning, [
    at(p.now),
    p.results.map((r) => r.id),
    p.results.map((r) => r.epoch),
    p.results.map((r) => r.outcome),
    p.results.map((r) => r.error),
    p.results.map((r) => (r.retryDelayMs === null ? null : Math.max(0, Math.round(r.retryDelayMs)))),
    p.results.map((r) => r.errorName ?? null),
    p.results.map((r) => r.errorMessage ?? null),
    p.results.map((r) => r.timedOut ?? false),
    p.results.map((r) => r.httpStatus ?? null),
    p.results.map((r) => r.result ?? null),
  ]);
  const finished: FinishedTask[] = [];
  const lost: LostFence[] = [];
  for (const r of rows) {
    if (r.status !== null && r.epoch === null) finished.push({ id: String(r.id), status: r.status, runAt: r.run_at! });
    else lost.push(lostFromRow(r));
  }
  return { finished, lost };
}

/** Heartbeat: pushes a running attempt's lease out, only for its own epoch. */
const tasksExtendLease = sql(
  'tasks_extend_lease_if_running',
  `update tasks set
     lease_expires_at = greatest(lease_expires_at, coalesce($1::timestamptz, now()) + make_interval(secs => $4::double precision)),
     updated_at = coalesce($1::timestamptz, now())
   where id = $2::bigint and lease_epoch = $3::bigint and status = 'running'
   returning lease_expires_at`,
);

export async function extendLease(
  q: Queryable,
  p: { now?: Now; id: string; epoch: number; seconds: number },
): Promise<Date | null> {
  const rows = await q.query<{ lease_expires_at: Date }>(tasksExtendLease, [at(p.now), p.id, p.epoch, p.seconds]);
  return rows[0]?.lease_expires_at ?? null;
}

// ---------------------------------------------------------------------------
// Maintenance: reap, purge

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
   where t.id = e.id
   returning e.next_status, t.id, t.last_error, e.attempt, e.lease_epoch, e.attempt_started_at, clock.now
   ),
   -- Attempt history (migration 0017): an attempt handed off and never
   -- reported is \`lease_expired\`; a claim given back (queued) was no attempt.
   attempts_written as (
     insert into task_attempts (task_id, attempt, epoch, outcome, started_at, finished_at, error_name, error_message)
     select r.id, r.attempt, r.lease_epoch, 'lease_expired', r.attempt_started_at, r.now, 'LeaseExpired', r.last_error
     from reaped r
     where r.next_status <> 'queued'
   )
   select next_status from reaped`,
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
   deleted as (
     delete from tasks t using doomed where t.id = doomed.id
     returning t.id, t.tenant, t.idempotency_key, t.status
   ),
   attempts_purged as (
     delete from task_attempts a using deleted where a.task_id = deleted.id
   ),
   marks_purged as (
     delete from dispatch_marks m where m.claim_token in (
       select claim_token from dispatch_marks
       where dispatched_at < coalesce($1::timestamptz, now()) - make_interval(secs => $4::int)
       order by dispatched_at
       limit $3::int)
   ),
   kept as (
     insert into spent_idempotency_keys (tenant, idempotency_key, task_id, status, spent_at)
     select tenant, idempotency_key, id, status, coalesce($1::timestamptz, now())
     from deleted where idempotency_key is not null
     on conflict do nothing
   )
   select count(*)::int as n from deleted`,
);

export async function purgeFinishedTasks(
  q: Queryable,
  p: { now?: Now; retentionSeconds: number; limit: number; markRetentionSeconds: number },
): Promise<number> {
  const rows = await q.query<{ n: number }>(tasksPurgeFinished, [at(p.now), p.retentionSeconds, p.limit, p.markRetentionSeconds]);
  return rows[0]?.n ?? 0;
}

const spentKeysPurge = sql(
  'spent_idempotency_keys_purge',
  `with doomed as (
     select tenant, idempotency_key from spent_idempotency_keys
     where spent_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)
     limit $3::int
   )
   delete from spent_idempotency_keys s using doomed d
   where s.tenant = d.tenant and s.idempotency_key = d.idempotency_key
   returning 1`,
);

export async function purgeSpentKeys(
  q: Queryable,
  p: { now?: Now; retentionSeconds: number; limit: number },
): Promise<number> {
  return (await q.query(spentKeysPurge, [at(p.now), p.retentionSeconds, p.limit])).length;
}

// ---------------------------------------------------------------------------
// Reads and cancel, always scoped by tenant

const tasksGet = sql('tasks_get', `select ${TASK_COLUMNS_SHOWN} from tasks where tenant = $1::text and id = $2::bigint`);

export async function getTask(q: Queryable, tenant: string, id: string): Promise<Task | null> {
  const rows = await q.query<TaskRow>(tasksGet, [tenant, id]);
  return rows[0] ? taskFromRow(rows[0]) : null;
}

const tasksGetByKey = sql(
  'tasks_get_by_key',
  `select ${TASK_COLUMNS_SHOWN} from tasks where tenant = $1::text and idempotency_key = $2::text`,
);

export async function getTaskByKey(q: Queryable, tenant: string, key: string): Promise<Task | null> {
  const rows = await q.query<TaskRow>(tasksGetByKey, [tenant, key]);
  return rows[0] ? taskFromRow(rows[0]) : null;
}

/**
 * Cancels a task that has not started: waiting, or claimed (even handed to
 * the Queue with a delay) but not yet started; the consumer's fenced start
 * then skips it. Addressed by id or by idempotency key.
 */
const tasksCancelIfNotStarted = sql(
  'tasks_cancel_if_not_started',
  `update tasks set status = 'cancelled', finished_at = coalesce($1::timestamptz, now()),
                    lease_expires_at = null, updated_at = coalesce($1::timestamptz, now())
   where tenant = $2::text
     and id = coalesce($3::bigint, (select id from tasks where tenant = $2::text and idempotency_key = $4::text))
     and (status in ('scheduled', 'queued') or (status = 'running' and started_at is null))
   returning ${TASK_COLUMNS}`,
);

export async function cancelTaskIfNotStarted(
  q: Queryable,
  p: { now?: Now; tenant: string; id?: string; idempotencyKey?: string },
): Promise<Task | null> {
  const rows = await q.query<TaskRow>(tasksCancelIfNotStarted, [at(p.now), p.tenant, p.id ?? null, p.idempotencyKey ?? null]);
  return rows[0] ? taskFromRow(rows[0]) : null;
}

export interface TaskFilter {
  queue?: string;
  statuses?: readonly string[];
  task?: string;
  createdAfter?: Date;
  createdBefore?: Date;
  /** Keyset cursor: only ids below this one (newest first). */
  beforeId?: string;
  limit: number;
}

/**
 * A tenant's tasks, newest first, by keyset (id below the cursor) so a page
 * costs the same however deep it is. Walks tasks_tenant_id_idx backwards.
 * The status filter matches the status as shown (a task claimed early but not
 * started is `queued`).
 */
const tasksListForTenant = sql(
  'tasks_list_for_tenant',
  `select ${TASK_COLUMNS_SHOWN} from tasks
   where tenant = $1::text
     and ($2::text is null or queue = $2::text)
     and ($3::text[] is null or ${shownStatusSql()} = any($3::text[]))
     and ($4::text is null or task = $4::text)
     and ($5::timestamptz is null or created_at >= $5::timestamptz)
     and ($6::timestamptz is null or created_at < $6::timestamptz)
     and ($7::bigint is null or id < $7::bigint)
   order by id desc
   limit $8::int`,
);

export async function listTasks(q: Queryable, tenant: string, f: TaskFilter): Promise<Task[]> {
  const rows = await q.query<TaskRow>(tasksListForTenant, [
    tenant,
    f.queue ?? null,
    f.statuses && f.statuses.length > 0 ? f.statuses : null,
    f.task ?? null,
    f.createdAfter ?? null,
    f.createdBefore ?? null,
    f.beforeId ?? null,
    f.limit,
  ]);
  return rows.map(taskFromRow);
}
